//! How a REST API (API Gateway v1) matches requests to the routes of `template.yaml`, and the
//! rules its resource tree must keep, which SAM's transform and cfn-lint do not check (only a
//! deploy would fail).

use crate::template::Route;
use std::collections::{BTreeMap, BTreeSet};

impl Route {
    /// How specific the route is, for choosing among the routes that match one request as a
    /// REST API walks its resource tree: at each level a literal segment before a variable.
    pub fn specificity(&self) -> Vec<bool> {
        segments(&self.path).map(|segment| !segment.starts_with('{')).collect()
    }

    /// The values of the route's `{name}` and `{name+}` variables in `path` (which the route
    /// matches), as API Gateway passes them (`pathParameters`).
    pub fn path_parameters(&self, path: &str) -> BTreeMap<String, String> {
        let mut parameters = BTreeMap::new();
        let mut actual = segments(path);
        for pattern in segments(&self.path) {
            let Some(segment) = actual.next() else { break };
            if let Some(name) = pattern.strip_prefix('{').and_then(|p| p.strip_suffix("+}")) {
                let rest: Vec<&str> = std::iter::once(segment).chain(actual.by_ref()).collect();
                parameters.insert(name.to_owned(), rest.join("/"));
                break;
            }
            if let Some(name) = pattern.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                parameters.insert(name.to_owned(), segment.to_owned());
            }
        }
        parameters
    }

    /// Whether a request matches this route as a REST API matches it: the method (or `ANY`),
    /// then the resource path segment by segment. A trailing slash is ignored (`/agents/`
    /// reaches the `/agents` resource; the function still sees the path as sent).
    pub fn matches(&self, method: &str, path: &str) -> bool {
        if !self.method.eq_ignore_ascii_case(method) && self.method != "ANY" {
            return false;
        }
        let mut pattern = segments(&self.path);
        let mut actual = segments(path);
        loop {
            match (pattern.next(), actual.next()) {
                (None, None) => return true,
                // A greedy variable takes the rest, which must not be empty.
                (Some(p), Some(_)) if p.starts_with('{') && p.ends_with("+}") => return true,
                (Some(p), Some(_)) if p.starts_with('{') && p.ends_with('}') => {}
                (Some(p), Some(a)) if p == a => {}
                _ => return false,
            }
        }
    }
}

/// The non-empty segments of a path (so `/a/b/` and `/a/b` are the same resource; an empty
/// segment in the middle cannot match a resource either way).
fn segments(path: &str) -> impl Iterator<Item = &str> + Clone {
    let trimmed = if path.len() > 1 { path.strip_suffix('/').unwrap_or(path) } else { path };
    trimmed.split('/').skip(1).filter(|segment| !segment.is_empty())
}

/// What breaks a REST API's resource tree among `routes` (the routes of one API), one sentence
/// each; empty when a deploy would accept them:
/// - a path is `/` then segments of letters, digits, `.`, `_`, `-`, or one variable `{name}`
///   (`{name+}`, greedy, only last), with no trailing slash (a REST resource has none);
/// - a resource has at most one variable child, so every route names the variable at a level
///   the same way (`/agents/{agent_id}` beside `/agents/{id}/runs` is two children);
/// - a method of a resource is integrated once.
pub fn resource_tree_problems<'a>(routes: impl IntoIterator<Item = &'a Route>) -> Vec<String> {
    let mut problems = Vec::new();
    let mut variable_children: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut methods: BTreeSet<(String, String)> = BTreeSet::new();
    for route in routes {
        let path = &route.path;
        if !path.starts_with('/') || (path.len() > 1 && path.ends_with('/')) || path.contains("//") {
            problems.push(format!("{path}: a resource path starts with / and has no empty segment or trailing /"));
            continue;
        }
        let parts: Vec<&str> = path.split('/').skip(1).filter(|s| !s.is_empty()).collect();
        let mut parent = String::new();
        for (index, segment) in parts.iter().enumerate() {
            if let Some(name) = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                let (name, greedy) = match name.strip_suffix('+') {
                    Some(name) => (name, true),
                    None => (name, false),
                };
                if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    problems.push(format!("{path}: {segment} is not a path variable"));
                }
                if greedy && index + 1 != parts.len() {
                    problems.push(format!("{path}: the greedy variable {segment} must be the last segment"));
                }
                variable_children.entry(parent.clone()).or_default().insert((*segment).to_owned());
            } else if segment.is_empty()
                || !segment.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            {
                problems.push(format!("{path}: {segment:?} is not a literal path segment"));
            }
            parent.push('/');
            parent.push_str(segment);
        }
        let resource = if parent.is_empty() { "/".to_owned() } else { parent };
        if !methods.insert((resource.clone(), route.method.to_ascii_uppercase())) {
            problems.push(format!("{} {resource}: integrated twice", route.method));
        }
    }
    for (parent, children) in variable_children {
        if children.len() > 1 {
            let children: Vec<&str> = children.iter().map(String::as_str).collect();
            let parent = if parent.is_empty() { "/" } else { &parent };
            problems.push(format!("{parent}: more than one variable child ({})", children.join(", ")));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(method: &str, path: &str) -> Route {
        Route { api: "Api".into(), method: method.into(), path: path.into(), streamed: false }
    }

    #[test]
    fn routes_match_like_a_rest_api_trailing_slash_or_not() {
        let list = route("GET", "/api/v1/external/meeting");
        assert!(list.matches("GET", "/api/v1/external/meeting/"));
        assert!(list.matches("GET", "/api/v1/external/meeting"));
        assert!(!list.matches("POST", "/api/v1/external/meeting"));
        assert!(!list.matches("GET", "/api/v1/external/meeting/12"));
        let detail = route("ANY", "/agents/{agent_id}");
        assert!(detail.matches("DELETE", "/agents/abc"));
        assert!(detail.matches("OPTIONS", "/agents/abc/"));
        assert!(!detail.matches("DELETE", "/agents/abc/restore"));
        assert!(!detail.matches("GET", "/agents/"));
        let greedy = route("GET", "/files/{proxy+}");
        assert!(greedy.matches("GET", "/files/a/b/"));
        assert!(!greedy.matches("GET", "/files/"));
    }

    #[test]
    fn a_literal_segment_is_more_specific_than_a_variable_at_the_same_level() {
        let schedules = route("ANY", "/agents/schedules");
        let agent = route("ANY", "/agents/{agent_id}");
        assert!(schedules.matches("GET", "/agents/schedules/") && agent.matches("GET", "/agents/schedules/"));
        assert!(schedules.specificity() > agent.specificity());
    }

    #[test]
    fn path_parameters_are_named_by_the_route() {
        let runs = route("GET", "/agents/{agent_id}/runs/{run_id}");
        let parameters: Vec<_> = runs.path_parameters("/agents/a/runs/r/").into_iter().collect();
        assert_eq!(parameters, [("agent_id".into(), "a".into()), ("run_id".into(), "r".into())]);
        assert_eq!(route("ANY", "/api/{proxy+}").path_parameters("/api/1/summary/")["proxy"], "1/summary");
        assert!(route("GET", "/health-check").path_parameters("/health-check").is_empty());
    }

    #[test]
    fn the_resource_tree_rules_catch_what_a_deploy_would_refuse() {
        let good = [
            route("ANY", "/agents"),
            route("ANY", "/agents/{agent_id}"),
            route("ANY", "/agents/{agent_id}/run"),
            route("ANY", "/agents/schedules"),
            route("ANY", "/agents/schedules/{schedule_id}"),
        ];
        assert_eq!(resource_tree_problems(&good), Vec::<String>::new());

        let greedy_beside_a_variable = [route("ANY", "/agents/{proxy+}"), route("POST", "/agents/{agent_id}/schedule")];
        let problems = resource_tree_problems(&greedy_beside_a_variable);
        assert_eq!(problems, ["/agents: more than one variable child ({agent_id}, {proxy+})"]);

        let two_names = [route("GET", "/tools/{id}"), route("GET", "/tools/{tool_id}/script")];
        assert_eq!(resource_tree_problems(&two_names).len(), 1);

        let bad = [
            route("GET", "/meeting/"),
            route("GET", "/files/{proxy+}/more"),
            route("GET", "/a b"),
            route("GET", "/x/{}"),
            route("GET", "/agents"),
            route("GET", "/agents"),
        ];
        let problems = resource_tree_problems(&bad);
        assert_eq!(problems.len(), 5, "{problems:#?}");
        assert!(problems.iter().any(|p| p.contains("integrated twice")));
    }
}
