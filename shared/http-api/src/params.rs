//! Query strings and form bodies as ordered key/value pairs.

use lambda_http::Body;

/// Decoded `application/x-www-form-urlencoded` pairs, in the order they were sent.
///
/// Decoding follows Python's `parse_qsl(keep_blank_values=True)`: `+` is a space, a key
/// without `=` has an empty value, empty pieces are skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Params(Vec<(String, String)>);

impl Params {
    /// Parses a query string or form body.
    pub fn parse(input: &[u8]) -> Self {
        Self(form_urlencoded::parse(input).map(|(k, v)| (k.into_owned(), v.into_owned())).collect())
    }

    /// The query string of a request URI.
    pub fn from_query(uri: &http::Uri) -> Self {
        Self::parse(uri.query().unwrap_or_default().as_bytes())
    }

    /// A form body.
    pub fn from_body(body: &Body) -> Self {
        Self::parse(body.as_ref())
    }

    /// The last value of `key`, as Django's `QueryDict.get` returns it.
    pub fn last(&self, key: &str) -> Option<&str> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The last value of `key`, treating an empty value as absent (django-filter's rule).
    pub fn non_empty(&self, key: &str) -> Option<&str> {
        self.last(key).filter(|v| !v.is_empty())
    }

    /// Every value of `key`.
    pub fn all(&self, key: &str) -> impl Iterator<Item = &str> {
        self.0.iter().filter(move |(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The pairs in order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.0
    }
}

/// Percent-encodes like Python's `quote_plus`: letters, digits and `_.-~` stay, space is `+`.
pub fn quote_plus(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-' | b'~' => out.push(byte as char),
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// Decodes like Python's `unquote_plus`: `+` is a space, `%XX` a byte; invalid UTF-8 is replaced.
pub fn unquote_plus(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(high), Some(low)) => {
                    out.push((high * 16 + low) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_parse_qsl_with_blank_values() {
        let params = Params::parse(b"a=1&b&c=x+y%21&&a=2");
        assert_eq!(params.last("a"), Some("2"));
        assert_eq!(params.last("b"), Some(""));
        assert_eq!(params.non_empty("b"), None);
        assert_eq!(params.last("c"), Some("x y!"));
        assert_eq!(params.all("a").collect::<Vec<_>>(), vec!["1", "2"]);
    }

    #[test]
    fn unquote_plus_matches_python() {
        assert_eq!(unquote_plus("a+b%2A~%2F%C3%A9"), "a b*~/é");
        assert_eq!(unquote_plus("100%"), "100%");
        assert_eq!(unquote_plus("%zz%4"), "%zz%4");
    }

    #[test]
    fn quote_plus_matches_python() {
        // urllib.parse.quote_plus("a b*~/é") == 'a+b%2A~%2F%C3%A9'
        assert_eq!(quote_plus("a b*~/é"), "a+b%2A~%2F%C3%A9");
    }
}

#[cfg(test)]
mod properties {
    //! Property tests: any query or form body parses (no panic); encoding round-trips.

    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn any_input_parses(input in prop::collection::vec(any::<u8>(), 0..256)) {
            let params = Params::parse(&input);
            let key = params.pairs().first().map(|(key, _)| key.clone());
            if let Some(key) = key {
                prop_assert!(params.last(&key).is_some());
                prop_assert!(params.all(&key).count() >= 1);
            }
            let _ = unquote_plus(&String::from_utf8_lossy(&input));
        }

        #[test]
        fn quote_plus_round_trips(value in any::<String>()) {
            prop_assert_eq!(unquote_plus(&quote_plus(&value)), value);
        }

        #[test]
        fn encoded_pairs_parse_back(pairs in prop::collection::vec((any::<String>(), any::<String>()), 0..6)) {
            let query: Vec<String> = pairs.iter().map(|(k, v)| format!("{}={}", quote_plus(k), quote_plus(v))).collect();
            let parsed = Params::parse(query.join("&").as_bytes());
            // Every piece has its `=`, so none is empty and none is skipped.
            prop_assert_eq!(parsed.pairs(), pairs.as_slice());
        }
    }
}
