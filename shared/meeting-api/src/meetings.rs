//! `GET /api/v1/external/meeting/…`: the meeting list, the five per-meeting reads, and the
//! redirect to a stored recording file (`…/{id}/recording/file.{format}`, 302 to a presigned S3
//! GET, `downloads`).
//!
//! Order of checks, as Django REST Framework's: route (404 `Not found.`), bearer token (401),
//! the token's scope (403, `meetings:read`), the client's rate limit (429, `client_limit`), `organization_id` (400), filters (400), page
//! (404 `Invalid page.`), meeting access (404).
//!
//! DynamoDB calls per request (documented in `docs/dynamodb.md`):
//! - every request: 1 BatchGetItem (token + application, consistent), then 1 UpdateItem (the
//!   client's bucket), beside the reads below when this container believes the bucket has room;
//!   none for a client this container knows to be over its limit;
//! - detail, summary, participants, recording, recording file: + 1 GetItem (no S3 call: the
//!   download URL is signed in the function);
//! - transcript: + 1 Query (one more per MB of transcript);
//! - list: + 1 Query per accessible organization (one more per MB of index entries), run
//!   concurrently, + 1 BatchGetItem for the page's meetings (none for an empty page).

use crate::downloads::{Download, RecordingDownloads};
use crate::views::{MeetingDetail, MeetingListItem, ParticipantsView, RecordingView, SummaryView, TranscriptView};
use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, Utc};
use futures_util::future::try_join_all;
use http::header::{CACHE_CONTROL, LOCATION};
use http::{Method, StatusCode};
use http_api::pagination::{INVALID_PAGE, Page, PageBody, PageNumberPagination, RequestUrl};
use http_api::routing::{method_not_allowed, not_found};
use http_api::{Body, HttpFunction, Params, Request, Response, ResponseFuture, detail_response, json};
use meeting_data::access::{AccessGrant, SCOPE};
use meeting_data::clock::{Clock, system_clock};
use meeting_data::listing::{MeetingFilter, newest_first};
use meeting_data::model::{Meeting, Recording, RecordingFormat};
use meeting_data::settings::{self, Lookup, SettingError};
use meeting_data::store::{AppStore, MeetingStore, StoreError};
use serde_json::{Map, Value, json};
use storage::rate_limit::RateLimiter;

const BASE_PATH: &str = "/api/v1/external/meeting";

/// Page size 10 by default, at most 100.
pub const PAGINATION: PageNumberPagination = PageNumberPagination { default_size: 10, max_size: 100 };

const MEETING_NOT_FOUND: &str = "Meeting not found.";
/// The file route of a meeting whose preferred recording is not a stored file of that format.
const RECORDING_NOT_FOUND: &str = "Recording file not found.";

/// The meetings function.
pub struct MeetingsService {
    apps: AppStore,
    meetings: MeetingStore,
    limiter: RateLimiter,
    downloads: RecordingDownloads,
    clock: Clock,
}

/// What a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resource {
    List,
    Detail(i64),
    Transcript(i64),
    Summary(i64),
    Participants(i64),
    Recording(i64),
    /// `…/{id}/recording/file.{format}`.
    RecordingFile(i64, RecordingFormat),
}

/// Every way a meeting request ends other than success.
enum Failure {
    Unauthorized,
    BadRequest(Map<String, Value>),
    NotFound(&'static str),
    Internal,
}

impl From<StoreError> for Failure {
    fn from(err: StoreError) -> Self {
        tracing::error!(error = %err, "meeting storage failure");
        Failure::Internal
    }
}

impl Failure {
    fn into_response(self) -> Response<Body> {
        match self {
            Failure::Unauthorized => crate::bearer::unauthorized(),
            Failure::BadRequest(errors) => json(StatusCode::BAD_REQUEST, &errors),
            Failure::NotFound(detail) => detail_response(StatusCode::NOT_FOUND, detail),
            Failure::Internal => detail_response(StatusCode::INTERNAL_SERVER_ERROR, "A server error occurred."),
        }
    }
}

impl MeetingsService {
    /// A service over explicit stores, the per-client limiter and the recordings bucket.
    pub fn new(apps: AppStore, meetings: MeetingStore, limiter: RateLimiter, downloads: RecordingDownloads) -> Self {
        Self { apps, meetings, limiter, downloads, clock: system_clock() }
    }

    /// A service configured from settings (see `template.yaml`).
    pub fn from_settings(aws: &aws_env::Clients, lookup: Lookup) -> Result<Self, SettingError> {
        let db = aws.dynamodb();
        let apps = AppStore::new(
            db.clone(),
            settings::required(lookup, settings::EXTERNAL_APPS_TABLE)?,
            settings::required(lookup, settings::ACCESS_TOKENS_TABLE)?,
        );
        let meetings = MeetingStore::new(db, settings::required(lookup, settings::MEETINGS_TABLE)?);
        let limiter = crate::client_limit::limiter_from_settings(aws, lookup)?;
        Ok(Self::new(apps, meetings, limiter, RecordingDownloads::from_settings(aws, lookup)?))
    }

    /// Replaces the clock (tests).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    async fn route(&self, request: Request) -> Response<Body> {
        let Some(resource) = parse_route(request.uri().path()) else {
            return not_found();
        };
        if request.method() != Method::GET {
            return method_not_allowed(request.method(), "GET");
        }
        let grant = match self.authorize(&request).await {
            Ok(grant) => grant,
            Err(failure) => return failure.into_response(),
        };
        if !grant.allows(SCOPE) {
            return crate::bearer::insufficient_scope(SCOPE);
        }
        let answer = async { self.serve(resource, &request, &grant).await.unwrap_or_else(Failure::into_response) };
        crate::client_limit::within_limit(&self.limiter, &grant.client_id, (self.clock)(), true, answer).await
    }

    async fn serve(
        &self,
        resource: Resource,
        request: &Request,
        grant: &AccessGrant,
    ) -> Result<Response<Body>, Failure> {
        let params = Params::from_query(request.uri());
        let organizations = accessible_organizations(grant, &params)?;
        match resource {
            Resource::List => self.list(request, &params, &organizations).await,
            Resource::Detail(id) => {
                Ok(json(StatusCode::OK, &MeetingDetail::of(&self.meeting(id, &organizations).await?)))
            }
            Resource::Summary(id) => {
                Ok(json(StatusCode::OK, &SummaryView::of(&self.meeting(id, &organizations).await?)))
            }
            Resource::Participants(id) => {
                Ok(json(StatusCode::OK, &ParticipantsView::of(&self.meeting(id, &organizations).await?)))
            }
            Resource::Recording(id) => {
                let meeting = self.meeting(id, &organizations).await?;
                let key = meeting.preferred_recording().and_then(Recording::object_key);
                let download = match key {
                    Some(key) => Some(self.download(key).await?),
                    None => None,
                };
                Ok(json(StatusCode::OK, &RecordingView::of(&meeting, download)))
            }
            Resource::RecordingFile(id, format) => {
                let meeting = self.meeting(id, &organizations).await?;
                let key = meeting
                    .preferred_recording()
                    .filter(|recording| recording.format == format)
                    .and_then(Recording::object_key)
                    .ok_or(Failure::NotFound(RECORDING_NOT_FOUND))?;
                let download = self.download(key).await?;
                Ok(Response::builder()
                    .status(StatusCode::FOUND)
                    .header(LOCATION, download.url)
                    .header(CACHE_CONTROL, "no-store")
                    .body(Body::Empty)
                    .map_err(|err| {
                        tracing::error!(error = %err, "recording redirect");
                        Failure::Internal
                    })?)
            }
            Resource::Transcript(id) => {
                let (meeting, segments) = self
                    .meetings
                    .get_with_transcript(id)
                    .await?
                    .filter(|(meeting, _)| organizations.contains(&meeting.organization_id))
                    .ok_or(Failure::NotFound(MEETING_NOT_FOUND))?;
                Ok(json(StatusCode::OK, &TranscriptView::of(&meeting, &segments)))
            }
        }
    }

    /// The grant of the request's bearer token.
    async fn authorize(&self, request: &Request) -> Result<AccessGrant, Failure> {
        let grant = crate::bearer::authorize(&self.apps, &self.limiter, (self.clock)(), request).await?;
        grant.ok_or(Failure::Unauthorized)
    }

    /// An unfiltered page: the count from the organizations' meeting counts, and only as many
    /// index entries of each organization as the page's depth, so its cost grows with the depth
    /// of the page, not the size of the organizations. An organization without a count (meetings
    /// imported before counts were kept) is read whole, as a filtered list is.
    async fn unfiltered_page(
        &self,
        page_request: &http_api::pagination::PageNumberRequest,
        organizations: &[i64],
    ) -> Result<(http_api::pagination::Page, Vec<i64>), Failure> {
        let counts = self.meetings.counts(organizations).await?;
        let uncounted: Vec<i64> = organizations.iter().copied().filter(|id| !counts.contains_key(id)).collect();
        let unfiltered = MeetingFilter::default();
        let read_whole = try_join_all(uncounted.iter().map(|id| self.meetings.index_entries(*id, &unfiltered))).await?;
        let count =
            counts.values().map(|count| count.meetings).sum::<usize>() + read_whole.iter().map(Vec::len).sum::<usize>();
        let page = page_request.resolve(count).map_err(|_| Failure::NotFound(INVALID_PAGE))?;
        let depth = page.range().end;
        let counted: Vec<i64> = organizations.iter().copied().filter(|id| counts.contains_key(id)).collect();
        let mut per_organization =
            try_join_all(counted.iter().map(|id| self.meetings.newest_entries(*id, depth))).await?;
        per_organization.extend(read_whole);
        let entries = newest_first(per_organization);
        let range = page.range();
        let ids = entries.get(range).unwrap_or_default().iter().map(|entry| entry.id).collect();
        Ok((page, ids))
    }

    /// A presigned GET of a stored recording, valid from now.
    async fn download(&self, key: &str) -> Result<Download, Failure> {
        self.downloads.presign(key, (self.clock)()).await.map_err(|err| {
            tracing::error!(error = %err, "presigning a recording download");
            Failure::Internal
        })
    }

    /// A meeting in one of `organizations`; any other is "not found", never "forbidden".
    async fn meeting(&self, id: i64, organizations: &[i64]) -> Result<Meeting, Failure> {
        self.meetings
            .get(id)
            .await?
            .filter(|meeting| organizations.contains(&meeting.organization_id))
            .ok_or(Failure::NotFound(MEETING_NOT_FOUND))
    }

    async fn list(&self, request: &Request, params: &Params, organizations: &[i64]) -> Result<Response<Body>, Failure> {
        let filter = parse_filter(params)?;
        let page_request = PAGINATION.request(params);
        let (page, ids) = if filter == MeetingFilter::default() {
            self.unfiltered_page(&page_request, organizations).await?
        } else {
            // Each organization from the index of the filter's most selective part, once its
            // count item says its meetings are in the filter indexes (docs/dynamodb.md); a title
            // alone reads the whole organization index, which needs no count.
            let counts = match filter.source() {
                meeting_data::listing::Source::Organization => Default::default(),
                _ => self.meetings.counts(organizations).await?,
            };
            let indexed = |id: &i64| counts.get(id).is_some_and(|count| count.filter_indexes);
            let per_organization =
                try_join_all(organizations.iter().map(|id| self.meetings.filtered_entries(*id, &filter, indexed(id))))
                    .await?;
            let entries = newest_first(per_organization);
            let page = page_request.resolve(entries.len()).map_err(|_| Failure::NotFound(INVALID_PAGE))?;
            let ids = entries[page.range()].iter().map(|entry| entry.id).collect();
            (page, ids)
        };
        let meetings = self.meetings.get_many(&ids).await?;
        Ok(list_page(request, &page, &meetings))
    }
}

/// A page of the meeting list as DRF renders it: `count`, the `next` and `previous` URLs of
/// `request`, and `meetings` in order.
pub fn list_page<B>(request: &http::Request<B>, page: &Page, meetings: &[Meeting]) -> Response<Body> {
    let url = RequestUrl::of(request);
    let body = PageBody {
        count: page.count,
        next: page.next_url(&url),
        previous: page.previous_url(&url),
        results: meetings.iter().map(MeetingListItem::of).collect(),
    };
    json(StatusCode::OK, &body)
}

impl HttpFunction for MeetingsService {
    fn handle(&self, request: Request) -> ResponseFuture<'_> {
        Box::pin(self.route(request))
    }
}

fn parse_route(path: &str) -> Option<Resource> {
    let rest = path.strip_prefix(BASE_PATH)?;
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() {
        return Some(Resource::List);
    }
    let mut segments = rest.strip_prefix('/')?.split('/');
    let id_text = segments.next()?;
    // Django's <int:pk>: ASCII digits only.
    if id_text.is_empty() || !id_text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let id: i64 = id_text.parse().ok()?;
    let resource = match segments.next() {
        None => Resource::Detail(id),
        Some("transcript") => Resource::Transcript(id),
        Some("summary") => Resource::Summary(id),
        Some("participants") => Resource::Participants(id),
        Some("recording") => match segments.next() {
            None => Resource::Recording(id),
            Some(file) => Resource::RecordingFile(id, meeting_data::recordings::parse_file_name(file)?),
        },
        Some(_) => return None,
    };
    segments.next().is_none().then_some(resource)
}

/// The organizations a request reads: all linked ones, or the one `organization_id` names.
fn accessible_organizations(grant: &AccessGrant, params: &Params) -> Result<Vec<i64>, Failure> {
    let Some(raw) = params.non_empty("organization_id") else {
        return Ok(grant.organization_ids.clone());
    };
    let bad = |message: &str| Failure::BadRequest(Map::from_iter([("organization_id".to_owned(), json!(message))]));
    let id: i64 = raw.trim().parse().map_err(|_| bad("Invalid organization_id format. Must be an integer."))?;
    if grant.organization_ids.contains(&id) {
        Ok(vec![id])
    } else {
        Err(bad("Organization not accessible to this external application."))
    }
}

/// The list filters; every invalid one is reported, keyed by parameter, as django-filter does.
fn parse_filter(params: &Params) -> Result<MeetingFilter, Failure> {
    let mut errors = Map::new();
    let mut field = |name: &str, message: &str| {
        errors.insert(name.to_owned(), json!([message]));
    };
    let mut filter = MeetingFilter { title: params.non_empty("title").map(str::to_owned), ..MeetingFilter::default() };
    if let Some(raw) = params.non_empty("participants") {
        let ids: Result<Vec<i64>, _> =
            raw.split(',').map(str::trim).filter(|id| !id.is_empty()).map(str::parse::<i64>).collect();
        match ids {
            Ok(ids) if !ids.is_empty() => filter.participants = Some(ids),
            Ok(_) => {}
            Err(_) => field("participants", "Enter a comma-separated list of integer user ids."),
        }
    }
    for (name, slot) in [("created_after", &mut filter.created_after), ("created_before", &mut filter.created_before)] {
        if let Some(raw) = params.non_empty(name) {
            match NaiveDate::parse_from_str(raw.trim(), "%Y-%m-%d").ok().filter(|date| in_python_years(date.year())) {
                Some(date) => *slot = Some(date),
                None => field(name, "Enter a valid date."),
            }
        }
    }
    for (name, slot) in
        [("summary_complete", &mut filter.summary_complete), ("from_calendar", &mut filter.from_calendar)]
    {
        if let Some(raw) = params.non_empty(name) {
            match raw.trim() {
                "true" | "True" | "1" => *slot = Some(true),
                "false" | "False" | "0" => *slot = Some(false),
                _ => field(name, "Must be a valid boolean."),
            }
        }
    }
    if let Some(raw) = params.non_empty("updated_after") {
        match parse_instant(raw.trim()) {
            Some(instant) => filter.updated_after = Some(instant),
            None => field("updated_after", "Enter a valid date/time."),
        }
    }
    if errors.is_empty() { Ok(filter) } else { Err(Failure::BadRequest(errors)) }
}

/// Whether `year` is one Python's dates (and so DRF's fields) hold: 1 to 9999. chrono's `%Y` also
/// reads signed and longer years, whose sort keys (`+10000-…`) would not sort as times.
fn in_python_years(year: i32) -> bool {
    (1..=9999).contains(&year)
}

/// An ISO 8601 date-time (offset optional, UTC assumed) or a date (its midnight UTC), in years
/// 1 to 9999 once in UTC.
fn parse_instant(raw: &str) -> Option<DateTime<Utc>> {
    let instant = if let Ok(instant) = DateTime::parse_from_rfc3339(raw) {
        instant.with_timezone(&Utc)
    } else if let Ok(naive) = NaiveDateTime::parse_from_str(raw, "%Y-%m-%dT%H:%M:%S%.f") {
        naive.and_utc()
    } else {
        NaiveDate::parse_from_str(raw, "%Y-%m-%d").ok()?.and_hms_opt(0, 0, 0)?.and_utc()
    };
    in_python_years(instant.year()).then_some(instant)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_parse_like_django_int_patterns() {
        assert_eq!(parse_route("/api/v1/external/meeting/"), Some(Resource::List));
        assert_eq!(parse_route("/api/v1/external/meeting"), Some(Resource::List));
        assert_eq!(parse_route("/api/v1/external/meeting/12/"), Some(Resource::Detail(12)));
        assert_eq!(parse_route("/api/v1/external/meeting/12/transcript/"), Some(Resource::Transcript(12)));
        assert_eq!(parse_route("/api/v1/external/meeting/12/recording"), Some(Resource::Recording(12)));
        assert_eq!(
            parse_route("/api/v1/external/meeting/12/recording/file.mp3"),
            Some(Resource::RecordingFile(12, RecordingFormat::Mp3))
        );
        assert_eq!(
            parse_route("/api/v1/external/meeting/12/recording/file.wav/"),
            Some(Resource::RecordingFile(12, RecordingFormat::Wav))
        );
        for bad in [
            "/api/v1/external/meeting/abc/",
            "/api/v1/external/meeting/-1/",
            "/api/v1/external/meeting/+1/",
            "/api/v1/external/meeting/1/other/",
            "/api/v1/external/meeting/1/summary/x/",
            "/api/v1/external/meeting/99999999999999999999/",
            "/api/v1/external/meetings/",
            "/api/v1/external/meeting/1/recording//",
            "/api/v1/external/meeting/1/recording/file.ogg",
            "/api/v1/external/meeting/1/recording/file.MP3",
            "/api/v1/external/meeting/1/recording/file.mp3/x",
            "/api/v1/external/meeting/1/transcript/file.mp3",
        ] {
            assert_eq!(parse_route(bad), None, "{bad}");
        }
    }

    proptest::proptest! {
        #[test]
        fn a_recording_file_segment_routes_only_when_it_names_a_format(id in 0i64..i64::MAX, file in "\\PC{0,12}") {
            let route = parse_route(&format!("/api/v1/external/meeting/{id}/recording/{file}"));
            match route {
                Some(Resource::RecordingFile(routed, format)) => {
                    proptest::prop_assert_eq!(routed, id);
                    let name = meeting_data::recordings::file_name(format);
                    let slashed = format!("{}/", name);
                    proptest::prop_assert!(file == name || file == slashed);
                }
                Some(Resource::Recording(routed)) => proptest::prop_assert!(routed == id && file.is_empty()),
                Some(other) => proptest::prop_assert!(false, "{other:?}"),
                None => proptest::prop_assert!(meeting_data::recordings::parse_file_name(&file).is_none()),
            }
        }
    }

    #[test]
    fn instants_accept_datetimes_and_dates() {
        let expected: DateTime<Utc> = "2026-11-02T09:00:00Z".parse().unwrap();
        assert_eq!(parse_instant("2026-11-02T09:00:00Z"), Some(expected));
        assert_eq!(parse_instant("2026-11-02T10:00:00+01:00"), Some(expected));
        assert_eq!(parse_instant("2026-11-02T09:00:00"), Some(expected));
        assert_eq!(parse_instant("2026-11-02"), "2026-11-02T00:00:00Z".parse().ok());
        assert_eq!(parse_instant("yesterday"), None);
    }

    #[test]
    fn invalid_filters_are_all_reported_by_parameter() {
        let params = Params::parse(b"created_after=2026-13-01&summary_complete=maybe&participants=1,x&title=ok");
        let Err(Failure::BadRequest(errors)) = parse_filter(&params) else { panic!("expected 400") };
        assert_eq!(
            Value::Object(errors),
            json!({
                "created_after": ["Enter a valid date."],
                "summary_complete": ["Must be a valid boolean."],
                "participants": ["Enter a comma-separated list of integer user ids."],
            })
        );
    }
}
