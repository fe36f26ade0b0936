//! Limits checked before a body is parsed: its size, and how deep a JSON body nests.
//!
//! Nesting matters beyond the parser: DynamoDB stores at most 32 levels of nested attributes, so
//! a body that nests deeper than the platform stores would fail at the write, after validation.

/// How deep JSON bodies may nest: the body object is level 1, a field's object level 2.
pub const MAX_JSON_DEPTH: usize = 16;

/// Where a JSON body nests deepest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nesting {
    /// Levels of arrays and objects at the deepest point (0 for a scalar).
    pub depth: usize,
    /// The top-level key under which that point lies, when the body is an object.
    pub field: Option<String>,
}

/// Scans `body` as JSON text without parsing it: the deepest nesting of `[` and `{` outside
/// strings, and the top-level key it lies under. Linear in the body, no allocation beyond the
/// key; malformed text gives an answer too (the parser refuses it afterwards).
pub fn json_nesting(body: &[u8]) -> Nesting {
    let mut deepest = Nesting { depth: 0, field: None };
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    // The last string that closed at depth 1, and the key currently open at depth 1.
    let mut string_start = 0usize;
    let mut last_string: Option<(usize, usize)> = None;
    let mut current_key: Option<(usize, usize)> = None;
    for (at, &byte) in body.iter().enumerate() {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => {
                    in_string = false;
                    if depth == 1 {
                        last_string = Some((string_start, at));
                    }
                }
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => {
                in_string = true;
                string_start = at + 1;
            }
            b':' if depth == 1 => current_key = last_string,
            b'{' | b'[' => {
                depth += 1;
                if depth > deepest.depth {
                    let field = current_key
                        .and_then(|(start, end)| body.get(start..end))
                        .map(|key| String::from_utf8_lossy(key).into_owned());
                    deepest = Nesting { depth, field: if depth > 1 { field } else { None } };
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deepest_point_and_its_field_are_found() {
        assert_eq!(json_nesting(b"42"), Nesting { depth: 0, field: None });
        assert_eq!(json_nesting(b"{}"), Nesting { depth: 1, field: None });
        let body = br#"{"name": "a{[", "metadata": {"a": [1, {"b": 2}]}, "tags": ["x"]}"#;
        assert_eq!(json_nesting(body), Nesting { depth: 4, field: Some("metadata".into()) });
        let escaped = br#"{"k\"{": "\\", "deep": [[["]]]"]]]}"#;
        assert_eq!(json_nesting(escaped), Nesting { depth: 4, field: Some("deep".into()) });
        let deep = format!("{{\"agent_config\": {}1{}}}", "[".repeat(100), "]".repeat(100));
        assert_eq!(json_nesting(deep.as_bytes()), Nesting { depth: 101, field: Some("agent_config".into()) });
    }

    #[test]
    fn malformed_text_still_gets_an_answer() {
        for body in [&b"]]]}}"[..], b"{\"a\": \"unterminated", b"{{{{", b"\"\\", b"\xff\xfe{\"\xff\": [", b""] {
            let nesting = json_nesting(body);
            assert!(nesting.depth <= body.len(), "{body:?}");
        }
    }
}
