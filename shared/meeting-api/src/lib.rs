//! HTTP handlers of the meeting data API: token endpoints and meeting reads.
