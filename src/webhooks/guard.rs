//! SSRF guard (SPEC §12): an endpoint's host is resolved at each attempt,
//! and an address that is loopback, private, link-local, multicast or
//! otherwise not public is refused unless `TALLY_WEBHOOK_ALLOW_PRIVATE=true`.
//! The HTTP client resolves through [`Resolver`], so the address checked is
//! the address connected to; a URL whose host is an address (in any of the
//! spellings the URL standard reads, numeric ones included) is checked by
//! [`check_url`] before the client sees it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use url::{Host, Url};

/// Why an endpoint URL is refused.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    #[error("the URL is not valid: {0}")]
    Invalid(String),
    #[error("the URL must be https (http only with TALLY_WEBHOOK_ALLOW_PRIVATE=true)")]
    NotHttps,
    #[error("{0} is not a public address (TALLY_WEBHOOK_ALLOW_PRIVATE=true allows it)")]
    NotPublic(String),
}

/// Whether `ip` is a public unicast address.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_public_v4(v4),
            None => is_public_v6(v6),
        },
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0 // "this network"
        || (a == 100 && (64..128).contains(&b)) // shared address space (RFC 6598)
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (b == 18 || b == 19)) // benchmarking (RFC 2544)
        || a >= 240) // reserved
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let segments = ip.segments();
    // Only global unicast (2000::/3) is public; within it, documentation
    // (2001:db8::/32), and the ranges that embed IPv4 addresses or tunnel
    // to them (6to4 2002::/16, Teredo 2001::/32, NAT64 64:ff9b::/96 is
    // outside 2000::/3 already), are refused.
    (segments[0] & 0xe000) == 0x2000
        && !(segments[0] == 0x2001 && segments[1] == 0x0db8)
        && segments[0] != 0x2002
        && !(segments[0] == 0x2001 && segments[1] == 0)
}

/// Checks an endpoint URL's form: `https` (or `http` when private addresses
/// are allowed), a host, and, when the host is an address, a public one
/// unless allowed; `localhost` names counted as loopback.
pub fn check_url(url: &Url, allow_private: bool) -> Result<(), Refusal> {
    match url.scheme() {
        "https" => {}
        "http" if allow_private => {}
        _ => return Err(Refusal::NotHttps),
    }
    let host = url
        .host()
        .ok_or_else(|| Refusal::Invalid("it has no host".to_owned()))?;
    if allow_private {
        return Ok(());
    }
    let ip = match host {
        Host::Ipv4(v4) => IpAddr::V4(v4),
        Host::Ipv6(v6) => IpAddr::V6(v6),
        Host::Domain(name) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            if name == "localhost" || name.ends_with(".localhost") {
                return Err(Refusal::NotPublic(name));
            }
            return Ok(());
        }
    };
    if is_public(ip) {
        Ok(())
    } else {
        Err(Refusal::NotPublic(ip.to_string()))
    }
}

/// The resolver of the delivery client: the host's addresses, without the
/// non-public ones unless allowed; an error when none is left.
pub struct Resolver {
    pub allow_private: bool,
}

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow_private = self.allow_private;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = found
                .iter()
                .copied()
                .filter(|a| allow_private || is_public(a.ip()))
                .collect();
            if allowed.is_empty() {
                let refused = found
                    .first()
                    .map_or_else(|| host.clone(), |a| format!("{host} ({})", a.ip()));
                return Err(Box::new(Refusal::NotPublic(refused))
                    as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_public_addresses_are_refused_in_every_spelling() -> Result<(), url::ParseError> {
        for url in [
            "https://127.0.0.1/hook",
            "https://2130706433/hook",
            "https://0x7f.0.0.1/hook",
            "https://127.1/hook",
            "https://[::1]/hook",
            "https://[::ffff:127.0.0.1]/hook",
            "https://[::ffff:10.0.0.1]/hook",
            "https://10.1.2.3/",
            "https://172.16.0.1/",
            "https://192.168.1.1/",
            "https://169.254.169.254/latest/meta-data",
            "https://100.64.0.1/",
            "https://0.0.0.0/",
            "https://224.0.0.1/",
            "https://[fe80::1]/",
            "https://[fc00::1]/",
            "https://[ff02::1]/",
            "https://localhost/",
            "https://api.localhost/",
        ] {
            let parsed = Url::parse(url)?;
            assert!(
                matches!(check_url(&parsed, false), Err(Refusal::NotPublic(_))),
                "{url} was not refused"
            );
            assert!(
                check_url(&parsed, true).is_ok(),
                "{url} refused when allowed"
            );
        }
        Ok(())
    }

    #[test]
    fn public_addresses_and_names_pass() -> Result<(), url::ParseError> {
        for url in [
            "https://93.184.215.14/",
            "https://[2606:4700::6810:85e5]/",
            "https://example.com/hook",
        ] {
            assert_eq!(check_url(&Url::parse(url)?, false), Ok(()), "{url}");
        }
        Ok(())
    }

    #[test]
    fn http_needs_private_addresses_allowed() -> Result<(), url::ParseError> {
        let url = Url::parse("http://example.com/hook")?;
        assert_eq!(check_url(&url, false), Err(Refusal::NotHttps));
        assert_eq!(check_url(&url, true), Ok(()));
        let ftp = Url::parse("ftp://example.com/")?;
        assert_eq!(check_url(&ftp, true), Err(Refusal::NotHttps));
        Ok(())
    }
}
