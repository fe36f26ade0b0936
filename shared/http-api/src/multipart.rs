//! `multipart/form-data` bodies (RFC 7578), read whole as API Gateway delivers them.

/// One part of a multipart body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// The form field name (`Content-Disposition: form-data; name="…"`).
    pub name: String,
    pub filename: Option<String>,
    pub content_type: Option<String>,
    pub data: Vec<u8>,
}

/// Why a body is not usable multipart.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MultipartError {
    #[error("the content type must be multipart/form-data with a boundary")]
    NotMultipart,
    #[error("the multipart body is malformed: {0}")]
    Malformed(&'static str),
}

/// Parses a `multipart/form-data` body given its `Content-Type` header value.
pub fn parse_multipart(content_type: &str, body: &[u8]) -> Result<Vec<Part>, MultipartError> {
    let mut params = content_type.split(';').map(str::trim);
    if !params.next().is_some_and(|media| media.eq_ignore_ascii_case("multipart/form-data")) {
        return Err(MultipartError::NotMultipart);
    }
    let boundary = params
        .filter_map(|param| param.split_once('='))
        .find(|(key, _)| key.trim().eq_ignore_ascii_case("boundary"))
        .map(|(_, value)| value.trim().trim_matches('"'))
        .filter(|boundary| !boundary.is_empty())
        .ok_or(MultipartError::NotMultipart)?;
    let delimiter = format!("--{boundary}").into_bytes();
    let next_part = format!("\r\n--{boundary}").into_bytes();

    let start = find(body, &delimiter, 0).ok_or(MultipartError::Malformed("no opening boundary"))?;
    let mut cursor = start + delimiter.len();
    let mut parts = Vec::new();
    loop {
        if body[cursor..].starts_with(b"--") {
            return Ok(parts);
        }
        if !body[cursor..].starts_with(b"\r\n") {
            return Err(MultipartError::Malformed("boundary not followed by a line break"));
        }
        cursor += 2;
        let headers_end =
            find(body, b"\r\n\r\n", cursor).ok_or(MultipartError::Malformed("part without headers end"))?;
        let headers = std::str::from_utf8(&body[cursor..headers_end])
            .map_err(|_| MultipartError::Malformed("non-UTF-8 headers"))?;
        let data_start = headers_end + 4;
        let data_end = find(body, &next_part, data_start).ok_or(MultipartError::Malformed("no closing boundary"))?;
        parts.push(part(headers, body[data_start..data_end].to_vec())?);
        cursor = data_end + next_part.len();
    }
}

fn part(headers: &str, data: Vec<u8>) -> Result<Part, MultipartError> {
    let mut name = None;
    let mut filename = None;
    let mut content_type = None;
    for line in headers.split("\r\n") {
        let Some((header, value)) = line.split_once(':') else { continue };
        if header.trim().eq_ignore_ascii_case("content-disposition") {
            for param in value.split(';').map(str::trim).skip(1) {
                if let Some((key, raw)) = param.split_once('=') {
                    let value = raw.trim().trim_matches('"').to_owned();
                    match key.trim().to_ascii_lowercase().as_str() {
                        "name" => name = Some(value),
                        "filename" => filename = Some(value),
                        _ => {}
                    }
                }
            }
        } else if header.trim().eq_ignore_ascii_case("content-type") {
            content_type = Some(value.trim().to_owned());
        }
    }
    let name = name.ok_or(MultipartError::Malformed("part without a form-data name"))?;
    Ok(Part { name, filename, content_type, data })
}

fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    haystack.get(from..)?.windows(needle.len()).position(|window| window == needle).map(|i| i + from)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TYPE: &str = "multipart/form-data; boundary=\"XyZ\"";

    #[test]
    fn parses_fields_and_files() {
        let body = b"preamble\r\n--XyZ\r\nContent-Disposition: form-data; name=\"metadata\"\r\n\r\n{\"name\": \"t\"}\r\n--XyZ\r\n\
Content-Disposition: form-data; name=\"file\"; filename=\"tool.py\"\r\nContent-Type: text/x-python\r\n\r\ndef run():\r\n    return 1\r\n--XyZ--\r\n";
        let parts = parse_multipart(TYPE, body).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!((parts[0].name.as_str(), parts[0].data.as_slice()), ("metadata", &b"{\"name\": \"t\"}"[..]));
        assert_eq!(parts[1].filename.as_deref(), Some("tool.py"));
        assert_eq!(parts[1].content_type.as_deref(), Some("text/x-python"));
        assert_eq!(parts[1].data, b"def run():\r\n    return 1");
    }

    #[test]
    fn refuses_other_types_and_broken_bodies() {
        assert_eq!(parse_multipart("application/json", b"{}"), Err(MultipartError::NotMultipart));
        assert_eq!(parse_multipart("multipart/form-data", b""), Err(MultipartError::NotMultipart));
        for body in [
            &b"no boundary at all"[..],
            b"--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nunterminated",
            b"--XyZ\r\n\r\n\r\nx\r\n--XyZ--",
        ] {
            assert!(matches!(parse_multipart(TYPE, body), Err(MultipartError::Malformed(_))), "{body:?}");
        }
        assert_eq!(parse_multipart(TYPE, b"--XyZ--\r\n"), Ok(vec![]));
    }
}

#[cfg(test)]
mod properties {
    //! Property tests: any body and content type gets an answer (no panic), and well-formed
    //! bodies give back the parts they were built from.

    use super::*;
    use proptest::prelude::*;

    /// Pieces multipart bodies are made of, so random bodies reach every branch of the parser.
    fn fragments() -> impl Strategy<Value = Vec<u8>> {
        let fragment = prop_oneof![
            Just(b"--XyZ".to_vec()),
            Just(b"--".to_vec()),
            Just(b"\r\n".to_vec()),
            Just(b"\r\n\r\n".to_vec()),
            Just(b"Content-Disposition: form-data; name=\"a\"".to_vec()),
            Just(b"; filename=\"f.py\"".to_vec()),
            Just(b"Content-Type: text/plain".to_vec()),
            Just(b":".to_vec()),
            prop::collection::vec(any::<u8>(), 0..12),
        ];
        prop::collection::vec(fragment, 0..24).prop_map(|pieces| pieces.concat())
    }

    fn content_types() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("multipart/form-data; boundary=XyZ".to_owned()),
            Just("multipart/form-data; boundary=\"XyZ\"".to_owned()),
            Just("multipart/form-data; boundary=".to_owned()),
            Just("Multipart/Form-Data;boundary=XyZ;charset=utf-8".to_owned()),
            any::<String>(),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn any_body_gets_parts_or_a_documented_error(content_type in content_types(), body in fragments()) {
            match parse_multipart(&content_type, &body) {
                Ok(parts) => prop_assert!(parts.iter().all(|part| body.len() >= part.data.len())),
                Err(MultipartError::NotMultipart | MultipartError::Malformed(_)) => {}
            }
        }

        #[test]
        fn well_formed_bodies_round_trip(
            parts in prop::collection::vec(("[a-z_]{1,12}", prop::option::of("[a-z]{1,8}\\.py"), prop::collection::vec(any::<u8>(), 0..64)), 0..5),
        ) {
            // The boundary is chosen so that no data holds it.
            let boundary = "----proptest-boundary-7f3a";
            let mut body = b"preamble\r\n".to_vec();
            for (name, filename, data) in &parts {
                body.extend_from_slice(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"").as_bytes());
                if let Some(filename) = filename {
                    body.extend_from_slice(format!("; filename=\"{filename}\"").as_bytes());
                }
                body.extend_from_slice(b"\r\n\r\n");
                body.extend_from_slice(data);
                body.extend_from_slice(b"\r\n");
            }
            body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
            let parsed = parse_multipart(&format!("multipart/form-data; boundary={boundary}"), &body);
            let expected: Vec<Part> = parts
                .into_iter()
                .map(|(name, filename, data)| Part { name, filename, content_type: None, data })
                .collect();
            prop_assert_eq!(parsed, Ok(expected));
        }
    }
}
