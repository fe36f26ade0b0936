//! Stored recordings: the import uploads a file into the stack's bucket (moto's S3 here), the
//! recording response carries a presigned `download_url`, and `…/recording/file.{format}`
//! answers 302 to it. moto checks neither signatures nor expiry, so the URL's signature is
//! recomputed here from the stack's credentials, with `aws-sigv4` and with botocore (AWS's Python
//! signer, an implementation of its own), and its expiry is checked.

use aws_credential_types::provider::ProvideCredentials;
use aws_sigv4::http_request::{
    PercentEncodingMode, SignableBody, SignableRequest, SignatureLocation, SigningSettings, UriPathNormalizationMode,
};
use integration_tests::{FIXTURES_DIR, TestClient, TestClock, TestStack, demo_fixture, meeting, obtain_token};
use meeting_api::{AuthService, MeetingsService};
use serde_json::json;
use std::time::{Duration, SystemTime};

const BASE: &str = "/api/v1/external/meeting";

/// A stack with the demo data (meeting 1002 has a stored wav), the meetings function, its clock,
/// and a token for an application linked to `organizations`.
async fn demo(organizations: &[i64]) -> (TestStack, TestClient, TestClock, String) {
    let stack = TestStack::new().await;
    stack.import(&demo_fixture()).await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(organizations).await;
    let token = obtain_token(&stack.client::<AuthService>(&clock), &client_id, &secret).await;
    (stack.clone(), stack.client::<MeetingsService>(&clock), clock, token)
}

fn demo_wav() -> Vec<u8> {
    std::fs::read(format!("{FIXTURES_DIR}/recordings/1002.wav")).unwrap()
}

/// GETs `url` as a client following the redirect would, with no `Authorization`.
async fn download(url: &str) -> (u16, Vec<u8>) {
    let client = outbound::Client::new(outbound::AddressPolicy::from_setting(Some("127.0.0.1")).unwrap());
    let mut response = client.get(url).send().await.unwrap();
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.unwrap() {
        body.extend_from_slice(&chunk);
    }
    (response.status().as_u16(), body)
}

/// The query parameter `name` of `url`, decoded.
fn query_param(url: &str, name: &str) -> Option<String> {
    let query = url.split_once('?')?.1;
    form_urlencoded::parse(query.as_bytes()).find(|(key, _)| key == name).map(|(_, value)| value.into_owned())
}

/// The signature S3 would compute for a presigned GET of `url` (without its query) by the
/// stack's credentials at `X-Amz-Date` for `X-Amz-Expires` seconds.
async fn expected_signature(stack: &TestStack, url: &str) -> String {
    let (unsigned, _) = url.split_once('?').unwrap();
    let date = query_param(url, "X-Amz-Date").unwrap();
    let signed_at: SystemTime =
        chrono::NaiveDateTime::parse_from_str(&date, "%Y%m%dT%H%M%SZ").unwrap().and_utc().into();
    let expires: u64 = query_param(url, "X-Amz-Expires").unwrap().parse().unwrap();
    let credentials = stack.sdk.credentials_provider().unwrap().provide_credentials().await.unwrap();
    let identity = credentials.into();
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(Duration::from_secs(expires));
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    let region = stack.sdk.region().unwrap().to_string();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(&region)
        .name("s3")
        .time(signed_at)
        .settings(settings)
        .build()
        .unwrap()
        .into();
    let request = SignableRequest::new("GET", unsigned, std::iter::empty(), SignableBody::UnsignedPayload).unwrap();
    let (_, signature) = aws_sigv4::http_request::sign(request, &params).unwrap().into_parts();
    signature
}

/// The URL botocore presigns for the same GET, by the same credentials, at the URL's
/// `X-Amz-Date`, for its `X-Amz-Expires`.
async fn botocore_presigned(stack: &TestStack, url: &str) -> String {
    let credentials = stack.sdk.credentials_provider().unwrap().provide_credentials().await.unwrap();
    let input = json!({
        "url": url.split_once('?').unwrap().0,
        "region": stack.sdk.region().unwrap().to_string(),
        "access_key": credentials.access_key_id(),
        "secret_key": credentials.secret_access_key(),
        "token": credentials.session_token(),
        "date": query_param(url, "X-Amz-Date").unwrap(),
        "expires": query_param(url, "X-Amz-Expires").unwrap().parse::<u64>().unwrap(),
    });
    integration_tests::python_server::run_script("s3_presign.py", &[], &input.to_string()).await.trim().to_owned()
}

#[tokio::test]
async fn a_stored_recording_downloads_through_the_redirect_without_the_token() {
    let (stack, meetings, clock, token) = demo(&[1]).await;
    let body = meetings.with_token(&token).get(&format!("{BASE}/1002/recording/")).expect(200).await;
    let signed_at = clock.now().timestamp();
    let expires_at = chrono::DateTime::from_timestamp(signed_at + 300, 0).unwrap();
    let download_url = body["download_url"].as_str().unwrap().to_owned();
    assert_eq!(
        body,
        json!({
            "meeting_id": 1002,
            "title": "Customer interview: Fabrikam",
            "recording_url": "/api/v1/external/meeting/1002/recording/file.wav",
            "duration": 0.5,
            "format": "wav",
            "download_url": download_url,
            "expires_at": expires_at.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        })
    );

    let redirect = meetings.with_token(&token).get(&format!("{BASE}/1002/recording/file.wav")).send().await;
    assert_eq!(redirect.expect(302), serde_json::Value::Null);
    assert_eq!(redirect.header("cache-control"), Some("no-store"));
    let location = redirect.header("location").unwrap().to_owned();
    assert_eq!(location, download_url, "the same clock signs the same URL");
    // The trailing slash every meeting path accepts.
    meetings.with_token(&token).get(&format!("{BASE}/1002/recording/file.wav/")).expect(302).await;

    // Path-style on the local endpoint, under the meeting's content-addressed key.
    let bucket = stack.recordings_bucket();
    let key = meeting_data::recordings::object_key(1, 1002, &demo_wav(), meeting_data::model::RecordingFormat::Wav);
    assert!(location.starts_with(&format!("{}?", bucket.object_url(&key))), "{location}");

    let (status, bytes) = download(&location).await;
    assert_eq!(status, 200);
    assert_eq!(bytes, demo_wav(), "the downloaded bytes are the imported file's");

    // moto checks no signature: S3's is recomputed over the same request.
    let signature = query_param(&location, "X-Amz-Signature").unwrap();
    assert_eq!(signature, expected_signature(&stack, &location).await);
    let reference = botocore_presigned(&stack, &location).await;
    assert_eq!(query_param(&reference, "X-Amz-Signature"), Some(signature), "botocore: {reference}");
    assert_eq!(query_param(&reference, "X-Amz-Credential"), query_param(&location, "X-Amz-Credential"));
    assert_eq!(query_param(&location, "X-Amz-SignedHeaders").as_deref(), Some("host"));
    // The expiry is the template's default, from the signing second.
    assert_eq!(query_param(&location, "X-Amz-Expires").as_deref(), Some("300"));
    let date = chrono::DateTime::from_timestamp(signed_at, 0).unwrap().format("%Y%m%dT%H%M%SZ").to_string();
    assert_eq!(query_param(&location, "X-Amz-Date"), Some(date));
}

/// Whether S3 here checks presigned URLs: LocalStack does (`make test-localstack` turns its
/// validation on), moto does not.
fn s3_checks_signatures() -> bool {
    std::env::var("LOCAL_AWS").is_ok_and(|backend| backend == "localstack")
}

#[tokio::test]
async fn an_expired_or_altered_url_is_refused_where_s3_checks_them() {
    let stack = TestStack::new().await;
    stack.import(&demo_fixture()).await;
    // Signed 301 s ago: its 300 s are over. (Time only moves forward for the client's bucket.)
    let past = TestClock::new();
    past.advance(-301);
    let (client_id, secret) = stack.create_app(&[1]).await;
    let token = obtain_token(&stack.client::<AuthService>(&past), &client_id, &secret).await;
    let meetings = stack.client::<MeetingsService>(&past);
    let body = meetings.with_token(&token).get(&format!("{BASE}/1002/recording/")).expect(200).await;
    let expired = body["download_url"].as_str().unwrap().to_owned();
    let fresh = stack.client::<MeetingsService>(&TestClock::new());
    let body = fresh.with_token(&token).get(&format!("{BASE}/1002/recording/")).expect(200).await;
    let valid = body["download_url"].as_str().unwrap().to_owned();
    let signature = query_param(&valid, "X-Amz-Signature").unwrap();
    let altered = valid.replace(&signature, &"0".repeat(signature.len()));
    let other_key = valid.replace("/recordings/1/1002/", "/recordings/1/1003/");

    assert_eq!(download(&valid).await, (200, demo_wav()));
    for (what, url) in [("expired", &expired), ("altered", &altered)] {
        let (status, _) = download(url).await;
        let expected = if s3_checks_signatures() { 403 } else { 200 };
        assert_eq!(status, expected, "{what} URL: {url}");
    }
    // Another key under the same signature is never served (it does not exist on moto).
    let (status, _) = download(&other_key).await;
    assert!(matches!(status, 403 | 404), "{status}");
}

#[tokio::test]
async fn the_expiry_is_the_parameter_and_bounded() {
    let stack = TestStack::new().await;
    stack.import(&demo_fixture()).await;
    let clock = TestClock::new();
    let (client_id, secret) = stack.create_app(&[1]).await;
    let token = obtain_token(&stack.client::<AuthService>(&clock), &client_id, &secret).await;
    let short = stack.with_settings(&[("RECORDING_URL_TTL_SECONDS", "60")]).client::<MeetingsService>(&clock);
    let body = short.with_token(&token).get(&format!("{BASE}/1002/recording/")).expect(200).await;
    let url = body["download_url"].as_str().unwrap();
    assert_eq!(query_param(url, "X-Amz-Expires").as_deref(), Some("60"));
    let expires_at = chrono::DateTime::from_timestamp(clock.now().timestamp() + 60, 0).unwrap();
    assert_eq!(body["expires_at"], expires_at.format("%Y-%m-%dT%H:%M:%SZ").to_string());

    for (value, problem) in [("3601", "must be at most 3600, not 3601"), ("0", "must be a positive integer, not 0")] {
        let settings = stack.with_settings(&[("RECORDING_URL_TTL_SECONDS", value)]);
        let env = settings.env.clone();
        let mut lookup_env = env.clone();
        lookup_env.extend(settings.overrides.clone());
        let Err(err) = MeetingsService::from_settings(&stack.aws(), &|name: &str| lookup_env.get(name).cloned()) else {
            panic!("{value} accepted");
        };
        assert_eq!(err.to_string(), format!("setting RECORDING_URL_TTL_SECONDS: {problem}"));
    }
}

#[tokio::test]
async fn the_file_route_is_not_found_unless_the_preferred_recording_is_that_stored_file() {
    let (stack, meetings, _clock, token) = demo(&[1]).await;
    let file_not_found = json!({"detail": "Recording file not found."});
    // A stored wav asked for as mp3; a URL-only recording (1001); no recording at all (1003).
    stack.import(&json!({"meetings": [meeting(1003, 1, 11, json!({"recordings": []}))]})).await;
    for path in
        ["1002/recording/file.mp3", "1001/recording/file.mp3", "1001/recording/file.wav", "1003/recording/file.mp3"]
    {
        let body = meetings.with_token(&token).get(&format!("{BASE}/{path}")).expect(404).await;
        assert_eq!(body, file_not_found, "{path}");
    }
    // URL-only and absent recordings have no download.
    let url_only = meetings.with_token(&token).get(&format!("{BASE}/1001/recording/")).expect(200).await;
    assert_eq!((url_only["download_url"].clone(), url_only["expires_at"].clone()), (json!(null), json!(null)));
    // mp3 is preferred: a stored wav beside a stored mp3 is not served.
    let both = meeting(
        1004,
        1,
        11,
        json!({"recordings": [
            {"format": "wav", "file": "recordings/1002.wav", "duration": 0.5},
            {"format": "mp3", "object_key": "recordings/1/1004/named.mp3", "duration": 0.5}
        ]}),
    );
    stack.import(&json!({"meetings": [both]})).await;
    let body = meetings.with_token(&token).get(&format!("{BASE}/1004/recording/")).expect(200).await;
    assert_eq!(body["recording_url"], "/api/v1/external/meeting/1004/recording/file.mp3");
    assert!(body["download_url"].as_str().unwrap().contains("/recordings/1/1004/named.mp3?"), "{body}");
    let wav = meetings.with_token(&token).get(&format!("{BASE}/1004/recording/file.wav")).expect(404).await;
    assert_eq!(wav, file_not_found);
    meetings.with_token(&token).get(&format!("{BASE}/1004/recording/file.mp3")).expect(302).await;

    // A format the route does not know is no route at all, before the token is read.
    for path in ["1002/recording/file.ogg", "1002/recording/file.WAV", "1002/recording/x", "1002/recording/file.wav/x"]
    {
        let body = meetings.get(&format!("{BASE}/{path}")).expect(404).await;
        assert_eq!(body, json!({"detail": "Not found."}), "{path}");
    }
    // Same bearer token rule and methods as every meeting route.
    let unauthorized = meetings.get(&format!("{BASE}/1002/recording/file.wav")).send().await;
    assert_eq!(unauthorized.expect(401)["detail"], "The external application credentials are invalid or inactive.");
    let body = meetings.with_token(&token).delete(&format!("{BASE}/1002/recording/file.wav")).expect(405).await;
    assert_eq!(body, json!({"detail": "Method \"DELETE\" not allowed."}));
}

#[tokio::test]
async fn another_tenants_or_an_unlinked_organizations_file_is_not_found() {
    let (stack, meetings, _clock, token) = demo(&[1]).await;
    let other = meeting(
        2002,
        2,
        21,
        json!({"recordings": [{"format": "wav", "file": "recordings/1002.wav", "duration": 0.5}]}),
    );
    stack.import(&json!({"meetings": [other]})).await;
    let not_found = json!({"detail": "Meeting not found."});
    for path in [
        "2002/recording/file.wav",
        "2002/recording/",
        "99999/recording/file.wav",
        "1002/recording/file.wav?organization_id=2",
    ] {
        let reply = meetings.with_token(&token).get(&format!("{BASE}/{path}")).send().await;
        if path.contains("organization_id") {
            assert_eq!(
                reply.expect(400),
                json!({"organization_id": "Organization not accessible to this external application."})
            );
        } else {
            assert_eq!(reply.expect(404), not_found, "{path}");
            assert!(reply.header("location").is_none());
        }
    }
    // Linked to both, narrowed to the other organization: 404 as every meeting route.
    let (client_id, secret) = stack.create_app(&[1, 2]).await;
    let clock = TestClock::new();
    let both = obtain_token(&stack.client::<AuthService>(&clock), &client_id, &secret).await;
    let path = format!("{BASE}/1002/recording/file.wav?organization_id=2");
    assert_eq!(meetings.with_token(&both).get(&path).expect(404).await, not_found);
    meetings.with_token(&both).get(&format!("{BASE}/2002/recording/file.wav")).expect(302).await;
}
