//! Page-number pagination, byte for byte as Django REST Framework's `PageNumberPagination`.
//!
//! - `size` is read with DRF's `_positive_int(strict=True, cutoff=max)`: a value that is not a
//!   positive integer falls back to the default; a larger one is cut to the maximum.
//! - `page` missing or empty means 1; `last` means the last page; anything else that is not an
//!   integer in `1..=pages` is "Invalid page." (a 404 for the caller).
//! - `next`/`previous` are the absolute request URL with `page` replaced (removed for page 1),
//!   the query re-encoded with its keys sorted, as `replace_query_param` does.

use crate::params::{Params, quote_plus};
use std::collections::BTreeMap;
use std::ops::Range;

/// The page wrapper: `count`, `next`, `previous`, `results`.
#[derive(Debug, serde::Serialize)]
pub struct PageBody<T> {
    pub count: usize,
    pub next: Option<String>,
    pub previous: Option<String>,
    pub results: Vec<T>,
}

/// DRF's message for every unusable page number.
pub const INVALID_PAGE: &str = "Invalid page.";

/// Page size settings of one list endpoint.
#[derive(Debug, Clone, Copy)]
pub struct PageNumberPagination {
    pub default_size: usize,
    pub max_size: usize,
}

/// What the caller asked for, before the total is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageNumberRequest {
    number: PageNumber,
    pub size: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PageNumber {
    Number(i64),
    Last,
    Invalid,
}

/// The page `page` names is out of range or not a number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidPage;

/// One resolved page over `count` items.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub number: usize,
    pub size: usize,
    pub count: usize,
    pub num_pages: usize,
}

impl PageNumberPagination {
    /// Reads `page` and `size` from the query.
    pub fn request(&self, params: &Params) -> PageNumberRequest {
        let size = params
            .last("size")
            .and_then(parse_python_int)
            .filter(|size| *size > 0)
            .map(|size| usize::try_from(size).unwrap_or(usize::MAX).min(self.max_size))
            .unwrap_or(self.default_size);
        let number = match params.last("page").filter(|page| !page.is_empty()) {
            None => PageNumber::Number(1),
            Some("last") => PageNumber::Last,
            Some(page) => parse_python_int(page).map_or(PageNumber::Invalid, PageNumber::Number),
        };
        PageNumberRequest { number, size }
    }
}

impl PageNumberRequest {
    /// Resolves the request against the total number of items.
    pub fn resolve(&self, count: usize) -> Result<Page, InvalidPage> {
        // Django's Paginator allows an empty first page.
        let num_pages = if count == 0 { 1 } else { count.div_ceil(self.size) };
        let number = match self.number {
            PageNumber::Last => num_pages,
            PageNumber::Number(n) if n >= 1 && usize::try_from(n).is_ok_and(|n| n <= num_pages) => n as usize,
            PageNumber::Number(_) | PageNumber::Invalid => return Err(InvalidPage),
        };
        Ok(Page { number, size: self.size, count, num_pages })
    }
}

impl Page {
    /// Index range of this page's items in the full, ordered result.
    pub fn range(&self) -> Range<usize> {
        let start = (self.number - 1) * self.size;
        start..(start + self.size).min(self.count)
    }

    /// URL of the next page, if any.
    pub fn next_url(&self, url: &RequestUrl) -> Option<String> {
        (self.number < self.num_pages).then(|| url.with_page(Some(self.number + 1)))
    }

    /// URL of the previous page, if any; page 1 has no `page` parameter.
    pub fn previous_url(&self, url: &RequestUrl) -> Option<String> {
        (self.number > 1).then(|| url.with_page((self.number > 2).then_some(self.number - 1)))
    }
}

/// The absolute URL of an incoming request, split into its base and its query.
#[derive(Debug, Clone)]
pub struct RequestUrl {
    base: String,
    params: Params,
}

impl RequestUrl {
    /// The request's absolute URL as the client wrote it: its
    /// [`client_base_url`](crate::gateway::client_base_url), then its path.
    pub fn of<B>(request: &http::Request<B>) -> Self {
        let base = format!("{}{}", crate::gateway::client_base_url(request), request.uri().path());
        Self { base, params: Params::from_query(request.uri()) }
    }

    fn with_page(&self, page: Option<usize>) -> String {
        self.with_param("page", page.map(|page| page.to_string()))
    }

    /// The URL with the parameter `name` set to `value` (removed when `None`), the query
    /// re-encoded with its keys sorted, as DRF's `replace_query_param` does (cursor pagination's
    /// `cursor` too).
    pub fn with_param(&self, name: &str, value: Option<String>) -> String {
        let mut query: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (key, value) in self.params.pairs() {
            query.entry(key.as_str()).or_default().push(value.clone());
        }
        match value {
            Some(value) => query.insert(name, vec![value]),
            None => query.remove(name),
        };
        let encoded: Vec<String> = query
            .iter()
            .flat_map(|(key, values)| {
                values.iter().map(move |value| format!("{}={}", quote_plus(key), quote_plus(value)))
            })
            .collect();
        if encoded.is_empty() { self.base.clone() } else { format!("{}?{}", self.base, encoded.join("&")) }
    }
}

/// Python's `int(str)` for the forms callers send: surrounding spaces and a sign allowed.
fn parse_python_int(value: &str) -> Option<i64> {
    value.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGINATION: PageNumberPagination = PageNumberPagination { default_size: 10, max_size: 100 };

    fn request(query: &str) -> PageNumberRequest {
        PAGINATION.request(&Params::parse(query.as_bytes()))
    }

    fn url(uri: &str) -> RequestUrl {
        RequestUrl::of(&http::Request::builder().uri(uri).body(()).unwrap())
    }

    #[test]
    fn size_defaults_caps_and_falls_back() {
        assert_eq!(request("").size, 10);
        assert_eq!(request("size=25").size, 25);
        assert_eq!(request("size=1000").size, 100);
        assert_eq!(request("size=0").size, 10);
        assert_eq!(request("size=-3").size, 10);
        assert_eq!(request("size=abc").size, 10);
    }

    #[test]
    fn page_numbers_resolve_like_django() {
        assert_eq!(request("").resolve(0).unwrap().number, 1);
        assert_eq!(request("page=").resolve(5).unwrap().number, 1);
        assert_eq!(request("page=last").resolve(25).unwrap().number, 3);
        assert_eq!(request("page=3").resolve(25).unwrap().range(), 20..25);
        assert_eq!(request("page=4").resolve(25), Err(InvalidPage));
        assert_eq!(request("page=0").resolve(25), Err(InvalidPage));
        assert_eq!(request("page=-1").resolve(25), Err(InvalidPage));
        assert_eq!(request("page=1.5").resolve(25), Err(InvalidPage));
        assert_eq!(request("page=2").resolve(0), Err(InvalidPage));
    }

    #[test]
    fn next_and_previous_keep_other_parameters_sorted() {
        let url = url("https://api.test/api/v1/external/meeting/?title=a%20b&size=2&page=2&b=1&b=2");
        let page = request("size=2&page=2").resolve(5).unwrap();
        assert_eq!(
            page.next_url(&url).as_deref(),
            Some("https://api.test/api/v1/external/meeting/?b=1&b=2&page=3&size=2&title=a+b")
        );
        assert_eq!(
            page.previous_url(&url).as_deref(),
            Some("https://api.test/api/v1/external/meeting/?b=1&b=2&size=2&title=a+b")
        );
    }

    #[test]
    fn first_and_last_pages_have_no_previous_and_next() {
        let url = url("http://localhost:3000/x/");
        let only = request("").resolve(3).unwrap();
        assert_eq!(only.next_url(&url), None);
        assert_eq!(only.previous_url(&url), None);
        let third = request("page=3&size=1").resolve(3).unwrap();
        assert_eq!(third.previous_url(&url).as_deref(), Some("http://localhost:3000/x/?page=2"));
    }

    #[test]
    fn relative_uris_use_host_and_forwarded_proto() {
        let request = http::Request::builder()
            .uri("/x/?page=1")
            .header("host", "example.test")
            .header("x-forwarded-proto", "https")
            .body(())
            .unwrap();
        let page = PAGINATION.request(&Params::parse(b"page=1")).resolve(11).unwrap();
        assert_eq!(page.next_url(&RequestUrl::of(&request)).as_deref(), Some("https://example.test/x/?page=2"));
    }

    #[test]
    fn links_keep_the_base_path_the_client_used() {
        let mut request = http::Request::builder().uri("https://abc.execute-api.example/x/?page=1").body(()).unwrap();
        request.extensions_mut().insert(crate::gateway::BasePath("/Prod".into()));
        let page = PAGINATION.request(&Params::parse(b"page=1")).resolve(11).unwrap();
        let next = page.next_url(&RequestUrl::of(&request));
        assert_eq!(next.as_deref(), Some("https://abc.execute-api.example/Prod/x/?page=2"));
    }
}

#[cfg(test)]
mod properties {
    //! Property tests: any `page` and `size` give a page inside the result or "Invalid page."
    //! (a 404), never a panic; links keep the request's base URL.

    use super::*;
    use proptest::prelude::*;

    const PAGINATION: PageNumberPagination = PageNumberPagination { default_size: 10, max_size: 100 };

    fn numbers() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            (0i64..50).prop_map(|n| n.to_string()),
            Just("last".to_owned()),
            Just(" 3 ".to_owned()),
            Just("99999999999999999999999".to_owned()),
            any::<String>(),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn any_page_and_size_resolve_or_are_invalid(
            page in prop::option::of(numbers()),
            size in prop::option::of(numbers()),
            count in prop_oneof![0usize..500, Just(usize::MAX / 2)],
            extra in "[a-z%+&=]{0,16}",
        ) {
            let mut query = extra.clone();
            if let Some(page) = &page {
                query.push_str(&format!("&page={}", quote_plus(page)));
            }
            if let Some(size) = &size {
                query.push_str(&format!("&size={}", quote_plus(size)));
            }
            let request = PAGINATION.request(&Params::parse(query.as_bytes()));
            prop_assert!((1..=100).contains(&request.size));
            // Otherwise `InvalidPage`: the documented 404 "Invalid page.".
            if let Ok(page) = request.resolve(count) {
                    prop_assert!(page.number >= 1 && page.number <= page.num_pages);
                    let range = page.range();
                    prop_assert!(range.start <= range.end && range.end <= count.max(range.start));
                    prop_assert!(range.len() <= page.size);
                    let uri = format!("https://api.test/x/?{query}");
                    if let Ok(http_request) = http::Request::builder().uri(uri.as_str()).body(()) {
                        let url = RequestUrl::of(&http_request);
                        for link in [page.next_url(&url), page.previous_url(&url)].into_iter().flatten() {
                            prop_assert!(link.starts_with("https://api.test/x/"), "{}", link);
                        }
                    }
            }
        }
    }
}
