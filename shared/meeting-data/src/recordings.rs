//! Recording files in the stack's private bucket: the object key layout, the keys an import may
//! name, and the `file.{format}` path segment of the download route.

use crate::model::RecordingFormat;
use sha2::{Digest, Sha256};

/// The prefix of every recording's key; the meetings function may read only under it.
pub const KEY_PREFIX: &str = "recordings/";

/// Longest object key S3 accepts, in bytes.
const MAX_KEY_BYTES: usize = 1024;

/// A file an import uploads before it writes the meeting that names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordingUpload {
    pub key: String,
    pub bytes: Vec<u8>,
    pub content_type: &'static str,
}

/// The key of an uploaded recording: `recordings/{organization_id}/{meeting_id}/{sha256}.{format}`.
/// Content-addressed, so importing the same file again writes the same object.
pub fn object_key(organization_id: i64, meeting_id: i64, content: &[u8], format: RecordingFormat) -> String {
    let hash: String = Sha256::digest(content).iter().map(|byte| format!("{byte:02x}")).collect();
    format!("{KEY_PREFIX}{organization_id}/{meeting_id}/{hash}.{}", format.as_str())
}

/// Why a key an import names is refused (keys are written by operators, so the rule is strict:
/// under `recordings/`, ASCII letters, digits, `-`, `_`, `.` and `/` only, no empty, `.` or `..`
/// segment, at most 1,024 bytes).
pub fn check_object_key(key: &str) -> Result<(), &'static str> {
    let Some(rest) = key.strip_prefix(KEY_PREFIX) else {
        return Err("must start with recordings/");
    };
    if key.len() > MAX_KEY_BYTES {
        return Err("must be at most 1024 bytes");
    }
    if !key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/')) {
        return Err("may contain only ASCII letters, digits, '-', '_', '.' and '/'");
    }
    if rest.split('/').any(|segment| matches!(segment, "" | "." | "..")) {
        return Err("must not have an empty, '.' or '..' segment");
    }
    Ok(())
}

/// The last segment of the download route for a format: `file.mp3`.
pub fn file_name(format: RecordingFormat) -> String {
    format!("file.{}", format.as_str())
}

/// The format the download route's last segment names: exactly `file.mp3` or `file.wav`.
pub fn parse_file_name(segment: &str) -> Option<RecordingFormat> {
    RecordingFormat::from_name(segment.strip_prefix("file.")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_content_addressed_under_the_meeting() {
        let key = object_key(1, 1001, b"abc", RecordingFormat::Mp3);
        assert_eq!(key, "recordings/1/1001/ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad.mp3");
        assert_eq!(check_object_key(&key), Ok(()));
    }

    #[test]
    fn named_keys_stay_under_the_prefix_and_plain() {
        for (key, why) in [
            ("other/a.mp3", "must start with recordings/"),
            ("recordings/../a.mp3", "must not have an empty, '.' or '..' segment"),
            ("recordings//a.mp3", "must not have an empty, '.' or '..' segment"),
            ("recordings/", "must not have an empty, '.' or '..' segment"),
            ("recordings/a b.mp3", "may contain only ASCII letters, digits, '-', '_', '.' and '/'"),
        ] {
            assert_eq!(check_object_key(key), Err(why), "{key}");
        }
        assert_eq!(check_object_key(&format!("recordings/{}", "a".repeat(1100))), Err("must be at most 1024 bytes"));
    }

    #[test]
    fn file_names_round_trip() {
        for format in [RecordingFormat::Mp3, RecordingFormat::Wav] {
            assert_eq!(parse_file_name(&file_name(format)), Some(format));
        }
        for bad in ["file.MP3", "file.ogg", "file.", "file", "recording.mp3", "file.mp3.mp3", ""] {
            assert_eq!(parse_file_name(bad), None, "{bad}");
        }
    }

    proptest::proptest! {
        #[test]
        fn only_the_two_file_names_parse(segment in "\\PC{0,16}") {
            let parsed = parse_file_name(&segment);
            proptest::prop_assert_eq!(parsed.is_some(), segment == "file.mp3" || segment == "file.wav");
        }

        #[test]
        fn accepted_keys_are_plain_paths_under_the_prefix(key in "(recordings/)?[a-z./ _-]{0,24}") {
            if check_object_key(&key).is_ok() {
                proptest::prop_assert!(key.starts_with(KEY_PREFIX));
                proptest::prop_assert!(!key.contains("..") || key.split('/').all(|s| s != ".."));
                proptest::prop_assert!(!key.contains(' ') && !key.contains("//"));
            }
        }
    }
}
