//! The guard on requests made for a tenant (MCP servers, flow servers, language models, tools,
//! remote agents, webhook receivers): a URL a tenant chose must not reach the platform's own
//! network. Addresses are checked after DNS resolution, so a public name that resolves to a
//! private address is refused too (SSRF, DNS rebinding); redirects are never followed.
//!
//! Refused unless the operator allows them: loopback, private (RFC 1918, ULA), link-local
//! (169.254.0.0/16, where instance metadata lives), shared, benchmarking, reserved, multicast and
//! unspecified addresses, and IPv6 forms that embed such an IPv4 address. The Lambda Runtime API
//! (`AWS_LAMBDA_RUNTIME_API`) is refused even when loopback is allowed.
//!
//! The allow-list (`OUTBOUND_ALLOWED_HOSTS`, template parameter `OutboundAllowedHosts`) holds host
//! names (`mcp.internal`), addresses (`10.0.0.5`) and networks (`10.0.0.0/8`, `fd00::/8`), comma
//! separated: MCP servers inside a VPC are legitimate. `make dev` allows loopback.

use std::net::{IpAddr, Ipv4Addr};

/// Which addresses tenant-directed requests may reach beyond the public internet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressPolicy {
    /// Host names and literal addresses, lower-case, without brackets.
    hosts: Vec<String>,
    networks: Vec<Network>,
    /// `host:port` of the Lambda Runtime API, never a tenant's target.
    runtime_api: Option<String>,
}

/// Why a URL may not be called.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the URL is not an absolute http(s) URL with a host")]
    NotHttp,
    #[error("{0} is a private, loopback or link-local address, which this platform does not call")]
    Address(String),
    #[error("{0} is the function runtime's own API")]
    RuntimeApi(String),
}

impl AddressPolicy {
    /// Only public addresses.
    pub fn public_only() -> Self {
        Self::default().with_runtime_api(std::env::var("AWS_LAMBDA_RUNTIME_API").ok())
    }

    /// From a comma-separated allow-list of host names, addresses and CIDR networks; an entry
    /// that is none of these is an error naming it.
    pub fn from_setting(value: Option<&str>) -> Result<Self, String> {
        let mut policy = Self::public_only();
        for entry in value.unwrap_or_default().split(',').map(str::trim).filter(|entry| !entry.is_empty()) {
            let entry = entry.to_ascii_lowercase();
            if entry.contains('/') {
                policy.networks.push(Network::parse(&entry).ok_or_else(|| format!("{entry} is not a CIDR network"))?);
            } else if entry.chars().all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c)) {
                policy.hosts.push(entry.trim_start_matches('[').trim_end_matches(']').to_owned());
            } else {
                return Err(format!("{entry} is not a host name, address or network"));
            }
        }
        Ok(policy)
    }

    /// Sets the runtime API address to refuse (`AWS_LAMBDA_RUNTIME_API`, e.g. `127.0.0.1:9001`).
    pub fn with_runtime_api(mut self, runtime_api: Option<String>) -> Self {
        self.runtime_api = runtime_api.filter(|value| !value.is_empty());
        self
    }

    /// Whether `host` is named on the allow-list.
    pub fn allows_host(&self, host: &str) -> bool {
        let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        self.hosts.contains(&host)
    }

    /// Whether a request for `host` may go to `ip`.
    pub fn allows_address(&self, host: &str, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        is_public(ip) || self.allows_host(host) || self.networks.iter().any(|network| network.contains(ip))
    }

    /// Checks what can be checked before resolving: the scheme, the runtime API, and a host that
    /// is a literal address. Names are checked by the guarded client's resolver.
    pub fn check_url(&self, url: &str) -> Result<(), Refused> {
        let url = url::Url::parse(url).map_err(|_| Refused::NotHttp)?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Refused::NotHttp);
        }
        let host = url.host_str().filter(|host| !host.is_empty()).ok_or(Refused::NotHttp)?;
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let port = url.port_or_known_default().unwrap_or(0);
        if let Some(runtime_api) = &self.runtime_api
            && is_runtime_api(runtime_api, bare, port)
        {
            return Err(Refused::RuntimeApi(format!("{host}:{port}")));
        }
        if let Ok(ip) = bare.parse::<IpAddr>()
            && !self.allows_address(bare, ip)
        {
            return Err(Refused::Address(host.to_owned()));
        }
        Ok(())
    }
}

impl AddressPolicy {
    /// The runtime API's port, when one is set.
    pub(crate) fn runtime_api_port(&self) -> Option<u16> {
        self.runtime_api.as_deref()?.rsplit_once(':')?.1.parse().ok()
    }

    /// Whether a connection to `ip` on the runtime API's port would reach the runtime API: its
    /// host is that address, or a loopback name or address and `ip` is loopback. Checked once a
    /// name is resolved (a tenant's name may resolve to it).
    pub(crate) fn is_runtime_api_address(&self, ip: IpAddr) -> bool {
        let Some((api_host, _)) = self.runtime_api.as_deref().and_then(|api| api.rsplit_once(':')) else {
            return false;
        };
        let api_host = api_host.trim_matches(['[', ']']);
        let ip = ip.to_canonical();
        match api_host.parse::<IpAddr>() {
            Ok(api) => api.to_canonical() == ip || (api.to_canonical().is_loopback() && ip.is_loopback()),
            Err(_) => api_host.eq_ignore_ascii_case("localhost") && ip.is_loopback(),
        }
    }
}

/// Whether `host:port` names the runtime API (`runtime_api` as `host:port`); loopback names
/// count as the loopback address they stand for.
fn is_runtime_api(runtime_api: &str, host: &str, port: u16) -> bool {
    let Some((api_host, api_port)) = runtime_api.rsplit_once(':') else { return false };
    let loopback = |name: &str| {
        name.eq_ignore_ascii_case("localhost") || name.parse::<IpAddr>().is_ok_and(|ip| ip.to_canonical().is_loopback())
    };
    api_port.parse() == Ok(port)
        && (api_host.eq_ignore_ascii_case(host) || (loopback(api_host.trim_matches(['[', ']'])) && loopback(host)))
}

/// An IP network in CIDR notation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Network {
    address: IpAddr,
    prefix: u8,
}

impl Network {
    fn parse(text: &str) -> Option<Self> {
        let (address, prefix) = text.split_once('/')?;
        let address: IpAddr = address.parse().ok()?;
        let prefix: u8 = prefix.parse().ok()?;
        let bits = if address.is_ipv4() { 32 } else { 128 };
        (prefix <= bits).then_some(Self { address: address.to_canonical(), prefix })
    }

    fn contains(&self, ip: IpAddr) -> bool {
        match (self.address, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix)).unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// Whether an address is on the public internet: not loopback, private, link-local, shared,
/// benchmarking, reserved, unspecified, multicast or broadcast. IPv6 forms that carry an IPv4
/// address (mapped, compatible, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) count as that address;
/// local NAT64 (`64:ff9b:1::/48`) and IPv4-translated (`::ffff:0:0:0/96`) ones are never public.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || a == 0
                || a >= 240
                || (a == 100 && (64..128).contains(&b))
                || (a == 198 && (18..20).contains(&b))
                || (a == 192 && b == 0 && c == 0))
        }
        IpAddr::V6(v6) => {
            let segments = v6.segments();
            let embedded = |high: u16, low: u16| {
                let [h1, h2] = high.to_be_bytes();
                let [l1, l2] = low.to_be_bytes();
                IpAddr::V4(Ipv4Addr::new(h1, h2, l1, l2))
            };
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            // Local NAT64 prefixes (64:ff9b:1::/48, RFC 8215: the IPv4 address anywhere in them)
            // and IPv4-translated addresses (::ffff:0:0:0/96, SIIT) are never public.
            if segments[..3] == [0x64, 0xff9b, 1] || segments[..6] == [0, 0, 0, 0, 0xffff, 0] {
                return false;
            }
            if segments[..6] == [0, 0, 0, 0, 0, 0] && !v6.is_loopback() && !v6.is_unspecified() {
                return is_public(embedded(segments[6], segments[7]));
            }
            if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                return is_public(embedded(segments[6], segments[7]));
            }
            if segments[0] == 0x2002 {
                return is_public(embedded(segments[1], segments[2]));
            }
            let first = segments[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || (first & 0xffc0) == 0xfec0)
        }
    }
}

/// The client of requests made for a tenant: the process's outbound settings, the guard, and the
/// policy it enforces (cheap to clone; clones share one connection pool). Building it does no
/// I/O: TLS is set up at the first HTTPS connection.
#[derive(Clone, Debug)]
pub struct TenantClient {
    client: crate::Client,
    policy: AddressPolicy,
}

impl TenantClient {
    /// A client enforcing `policy`: names are resolved by a resolver that drops the addresses
    /// the policy refuses, and literal addresses are checked by `for_url`.
    pub fn new(policy: AddressPolicy) -> Self {
        Self { client: crate::Client::new(policy.clone()), policy }
    }

    /// The guarded client for a request to `url`, once `url` passes what can be checked before
    /// resolving (literal addresses, the runtime API).
    pub fn for_url(&self, url: &str) -> Result<&crate::Client, Refused> {
        self.policy.check_url(url)?;
        Ok(&self.client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn special_ranges_are_not_public() {
        for address in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "198.18.0.1",
            "192.0.0.8",
            "0.0.0.0",
            "240.0.0.1",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "fec0::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
            // Local NAT64 and IPv4-translated addresses, even carrying a public address.
            "64:ff9b:1::a9fe:a9fe",
            "64:ff9b:1:0:808:808::",
            "::ffff:0:a9fe:a9fe",
            "::ffff:0:808:808",
        ] {
            assert!(!is_public(ip(address)), "{address}");
        }
        for address in ["93.184.216.34", "8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"] {
            assert!(is_public(ip(address)), "{address}");
        }
    }

    #[test]
    fn the_allow_list_takes_hosts_addresses_and_networks() {
        let policy =
            AddressPolicy::from_setting(Some(" mcp.internal, 10.0.0.0/8 ,fd00::/8, [::1], 127.0.0.1 ")).unwrap();
        assert!(policy.allows_address("mcp.internal", ip("10.9.9.9")));
        assert!(policy.allows_address("mcp.internal", ip("169.254.169.254")));
        assert!(policy.allows_address("other.example", ip("10.200.0.1")));
        assert!(policy.allows_address("other.example", ip("::ffff:10.0.0.1")));
        assert!(policy.allows_address("other.example", ip("fd12::1")));
        assert!(!policy.allows_address("other.example", ip("192.168.0.1")));
        assert!(!policy.allows_address("other.example", ip("169.254.169.254")));
        assert!(policy.check_url("http://[::1]:8080/mcp").is_ok());
        assert!(policy.check_url("http://127.0.0.1:8080/mcp").is_ok());
        assert_eq!(AddressPolicy::from_setting(Some("10.0.0.0/33")), Err("10.0.0.0/33 is not a CIDR network".into()));
        assert!(AddressPolicy::from_setting(Some("http://x")).is_err());
        assert!(AddressPolicy::from_setting(Some("0.0.0.0/0")).unwrap().allows_address("x", ip("127.0.0.1")));
    }

    #[test]
    fn literal_addresses_and_the_runtime_api_are_refused_before_any_request() {
        let public = AddressPolicy::default().with_runtime_api(Some("127.0.0.1:9001".into()));
        assert_eq!(
            public.check_url("http://169.254.169.254/latest/meta-data/"),
            Err(Refused::Address("169.254.169.254".into()))
        );
        assert_eq!(public.check_url("http://[::1]:3000/"), Err(Refused::Address("[::1]".into())));
        assert_eq!(public.check_url("ftp://example.com/"), Err(Refused::NotHttp));
        assert!(public.check_url("https://mcp.example.com/mcp").is_ok());
        let local = AddressPolicy::from_setting(Some("127.0.0.0/8,localhost"))
            .unwrap()
            .with_runtime_api(Some("127.0.0.1:9001".into()));
        assert!(local.check_url("http://127.0.0.1:8000/mcp").is_ok());
        for url in ["http://127.0.0.1:9001/2018-06-01/runtime/invocation/next", "http://localhost:9001/x"] {
            assert!(matches!(local.check_url(url), Err(Refused::RuntimeApi(_))), "{url}");
        }
    }

    #[tokio::test]
    async fn a_name_resolving_to_loopback_is_refused_after_resolution() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let url = format!("http://localhost:{port}/");
        let client = TenantClient::new(AddressPolicy::default());
        let err = client.for_url(&url).unwrap().get(&url).send().await.unwrap_err();
        let text = crate::describe(&err);
        assert!(text.contains("resolves only to private"), "{text}");
        let allowed = TenantClient::new(AddressPolicy::from_setting(Some("localhost")).unwrap());
        let accepted = tokio::spawn(async move { listener.accept().await.is_ok() });
        let _ = allowed.for_url(&url).unwrap().get(&url).timeout(std::time::Duration::from_millis(300)).send().await;
        assert!(accepted.await.unwrap(), "the allowed name connects");
    }

    #[test]
    fn the_runtime_apis_address_is_known_for_the_check_after_resolution() {
        let policy = AddressPolicy::default().with_runtime_api(Some("127.0.0.1:9001".into()));
        assert_eq!(policy.runtime_api_port(), Some(9001));
        for address in ["127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1"] {
            assert!(policy.is_runtime_api_address(ip(address)), "{address}");
        }
        assert!(!policy.is_runtime_api_address(ip("10.0.0.1")));
        let named = AddressPolicy::default().with_runtime_api(Some("localhost:9001".into()));
        assert!(named.is_runtime_api_address(ip("::1")));
        let remote = AddressPolicy::default().with_runtime_api(Some("169.254.100.1:9001".into()));
        assert!(remote.is_runtime_api_address(ip("169.254.100.1")) && !remote.is_runtime_api_address(ip("127.0.0.1")));
        assert_eq!(AddressPolicy::default().runtime_api_port(), None);
        assert!(!AddressPolicy::default().is_runtime_api_address(ip("127.0.0.1")));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Any allow-list text is a policy or an error naming an entry; any URL text is allowed
        /// or refused with a reason, never a panic; a refused literal address is never public.
        #[test]
        fn settings_and_urls_never_panic(
            setting in "[a-z0-9./:\\[\\], -]{0,40}",
            url in "(https?|ftp)://[a-z0-9.:\\[\\]@%-]{0,30}(/[a-z]{0,5})?",
        ) {
            if let Ok(policy) = AddressPolicy::from_setting(Some(&setting)) {
                let _ = policy.check_url(&url);
            }
            if let Err(Refused::Address(host)) = AddressPolicy::default().check_url(&url) {
                let bare = host.trim_start_matches('[').trim_end_matches(']');
                proptest::prop_assert!(bare.parse::<IpAddr>().is_ok_and(|ip| !is_public(ip)));
            }
        }
    }
}
