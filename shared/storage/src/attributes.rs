//! Reading an item's attributes by hand, for the item shapes read by the thousand per request
//! (index entries of a filtered meeting list, transcript segments): `serde_dynamo` takes ~2.6 µs
//! for a 7-attribute segment, this ~1 µs (`make bench`). Each reader names the attribute whose
//! value has the wrong type; attributes the caller does not ask for are ignored.

use crate::{Item, StoreError};
use aws_sdk_dynamodb::types::AttributeValue;
use std::str::FromStr;

/// The attributes of one stored item.
#[derive(Clone, Copy)]
pub struct Attributes<'a>(pub &'a Item);

impl<'a> Attributes<'a> {
    fn value(&self, name: &str) -> Option<&'a AttributeValue> {
        match self.0.get(name) {
            None | Some(AttributeValue::Null(_)) => None,
            Some(value) => Some(value),
        }
    }

    /// A string attribute (`S`), absent or null as `None`.
    pub fn optional_string(&self, name: &str) -> Result<Option<String>, StoreError> {
        match self.value(name) {
            None => Ok(None),
            Some(AttributeValue::S(text)) => Ok(Some(text.clone())),
            Some(_) => Err(wrong(name, "a string")),
        }
    }

    /// A string attribute (`S`) that must be there.
    pub fn string(&self, name: &str) -> Result<String, StoreError> {
        self.optional_string(name)?.ok_or_else(|| wrong(name, "a string"))
    }

    /// A string attribute (`S`) that must be there, borrowed from the item.
    pub fn str(&self, name: &str) -> Result<&'a str, StoreError> {
        match self.value(name) {
            Some(AttributeValue::S(text)) => Ok(text),
            _ => Err(wrong(name, "a string")),
        }
    }

    /// A string attribute (`S`) parsed as `T`.
    pub fn parsed<T: FromStr>(&self, name: &str) -> Result<T, StoreError> {
        self.parsed_with(name, |text| text.parse().ok())
    }

    /// A string attribute (`S`) read by `parse` (a faster parser than `T`'s `FromStr`, say).
    pub fn parsed_with<T>(&self, name: &str, parse: impl FnOnce(&str) -> Option<T>) -> Result<T, StoreError> {
        match self.value(name) {
            Some(AttributeValue::S(text)) => parse(text).ok_or_else(|| wrong(name, "a valid value")),
            _ => Err(wrong(name, "a string")),
        }
    }

    /// A number attribute (`N`) that must be there.
    pub fn number<T: FromStr>(&self, name: &str) -> Result<T, StoreError> {
        match self.value(name) {
            Some(AttributeValue::N(number)) => number.parse().map_err(|_| wrong(name, "a number in range")),
            _ => Err(wrong(name, "a number")),
        }
    }

    /// A boolean attribute (`BOOL`), absent or null as `false`.
    pub fn flag(&self, name: &str) -> Result<bool, StoreError> {
        match self.value(name) {
            None => Ok(false),
            Some(AttributeValue::Bool(flag)) => Ok(*flag),
            Some(_) => Err(wrong(name, "a boolean")),
        }
    }

    /// A list of numbers (`L` of `N`), absent or null as empty.
    pub fn numbers<T: FromStr>(&self, name: &str) -> Result<Vec<T>, StoreError> {
        match self.value(name) {
            None => Ok(Vec::new()),
            Some(AttributeValue::L(values)) => values
                .iter()
                .map(|value| match value {
                    AttributeValue::N(number) => number.parse().map_err(|_| wrong(name, "a list of numbers in range")),
                    _ => Err(wrong(name, "a list of numbers")),
                })
                .collect(),
            Some(_) => Err(wrong(name, "a list of numbers")),
        }
    }
}

fn wrong(name: &str, expected: &'static str) -> StoreError {
    StoreError::Attribute { name: name.to_owned(), expected }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{n, s};

    fn item() -> Item {
        Item::from([
            ("text".to_owned(), s("hello")),
            ("nothing".to_owned(), AttributeValue::Null(true)),
            ("count".to_owned(), n(42)),
            ("huge".to_owned(), AttributeValue::N("1e400".into())),
            ("flag".to_owned(), AttributeValue::Bool(true)),
            ("ids".to_owned(), AttributeValue::L(vec![n(1), n(2)])),
            ("mixed".to_owned(), AttributeValue::L(vec![n(1), s("2")])),
        ])
    }

    #[test]
    fn each_reader_returns_the_value_or_names_the_attribute() {
        let item = item();
        let attributes = Attributes(&item);
        assert_eq!(attributes.string("text").unwrap(), "hello");
        assert_eq!(attributes.str("text").unwrap(), "hello");
        assert_eq!(attributes.optional_string("nothing").unwrap(), None);
        assert_eq!(attributes.optional_string("absent").unwrap(), None);
        assert_eq!(attributes.number::<i64>("count").unwrap(), 42);
        assert_eq!(
            attributes.parsed::<u8>("text").unwrap_err().to_string(),
            wrong("text", "a valid value").to_string()
        );
        assert!(attributes.flag("flag").unwrap());
        assert!(!attributes.flag("absent").unwrap());
        assert_eq!(attributes.numbers::<i64>("ids").unwrap(), vec![1, 2]);
        assert_eq!(attributes.numbers::<i64>("absent").unwrap(), Vec::<i64>::new());

        for (result, name) in [
            (attributes.string("count").map(|_| ()), "count"),
            (attributes.string("nothing").map(|_| ()), "nothing"),
            (attributes.str("count").map(|_| ()), "count"),
            (attributes.str("absent").map(|_| ()), "absent"),
            (attributes.number::<i64>("text").map(|_| ()), "text"),
            (attributes.number::<i32>("huge").map(|_| ()), "huge"),
            (attributes.flag("text").map(|_| ()), "text"),
            (attributes.numbers::<i64>("mixed").map(|_| ()), "mixed"),
            (attributes.numbers::<i64>("count").map(|_| ()), "count"),
        ] {
            let err = result.unwrap_err();
            assert!(matches!(&err, StoreError::Attribute { name: named, .. } if named == name), "{err}");
        }
    }
}
