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
                    let field = current_key.and_then(|(start, end)| key_text(body, start, end));
                    deepest = Nesting { depth, field: if depth > 1 { field } else { None } };
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// The key whose text lies between `start` and `end` (the quotes excluded), unescaped as JSON.
fn key_text(body: &[u8], start: usize, end: usize) -> Option<String> {
    let literal = body.get(start.checked_sub(1)?..=end)?;
    serde_json::from_slice(literal).ok().or_else(|| Some(String::from_utf8_lossy(body.get(start..end)?).into_owned()))
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

    /// The depth of a parsed value, for comparison.
    fn depth_of(value: &serde_json::Value) -> usize {
        match value {
            serde_json::Value::Array(items) => 1 + items.iter().map(depth_of).max().unwrap_or(0),
            serde_json::Value::Object(fields) => 1 + fields.values().map(depth_of).max().unwrap_or(0),
            _ => 0,
        }
    }

    fn json_values() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            "[\\PC\"\\\\{}\\[\\]]{0,8}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(8, 64, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
                proptest::collection::btree_map("[a-z\"{\\[]{0,4}", inner, 0..4)
                    .prop_map(|map| serde_json::Value::Object(map.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Any bytes get an answer, never deeper than the brackets they hold.
        #[test]
        fn any_bytes_get_an_answer(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let nesting = json_nesting(&body);
            let opened = body.iter().filter(|b| matches!(b, b'[' | b'{')).count();
            proptest::prop_assert!(nesting.depth <= opened, "depth {} over {} brackets", nesting.depth, opened);
        }

        /// For valid JSON the scan agrees with the parser, strings with brackets and quotes included.
        #[test]
        fn valid_json_nests_as_parsed(value in json_values()) {
            let text = serde_json::to_vec(&value).unwrap();
            let nesting = json_nesting(&text);
            proptest::prop_assert_eq!(nesting.depth, depth_of(&value));
            if let (serde_json::Value::Object(fields), Some(field)) = (&value, &nesting.field) {
                let deepest = fields.get(field).map(depth_of).unwrap_or(0) + 1;
                proptest::prop_assert_eq!(deepest, nesting.depth);
            }
        }
    }
}
