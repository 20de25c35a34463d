use super::text::{has_forbidden_control, Lines};
use percent_encoding::percent_decode_str;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use url::{Host, Url};

/// An app's Web Redirect URL: `http(s)://host/path`, optionally with a query, never
/// with a fragment or credentials (RFC 6749 §3.1.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedirectUrl(Url);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RedirectUrlError {
    #[error("redirect URL is not a valid absolute URL")]
    Malformed,
    #[error("redirect URL must use http or https")]
    Scheme,
    #[error("redirect URL must name a host")]
    NoHost,
    #[error("redirect URL must not contain a fragment")]
    Fragment,
    #[error("redirect URL must not contain a user name or password")]
    Credentials,
}

impl RedirectUrl {
    pub fn parse(input: &str) -> Result<Self, RedirectUrlError> {
        let url = Url::parse(input.trim()).map_err(|_| RedirectUrlError::Malformed)?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(RedirectUrlError::Scheme);
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(RedirectUrlError::NoHost);
        }
        if url.fragment().is_some() {
            return Err(RedirectUrlError::Fragment);
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(RedirectUrlError::Credentials);
        }
        Ok(Self(url))
    }

    pub fn url(&self) -> &Url {
        &self.0
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// Whether an authorization request may send its answer to `given` instead
    /// of this registered URL (SPEC §6): the same scheme, host and port, and a
    /// path that is the registered one or below it at a segment boundary, as
    /// GitHub applies it; no `.` or `..` segment, literal or percent-encoded;
    /// no fragment. The query may differ. RFC 8252 §7.3: a registered
    /// `http://127.0.0.1` or `http://[::1]` URL matches any port (native apps
    /// listen on one the system picks); `localhost` does not, since it may
    /// resolve elsewhere.
    pub fn admits_override(&self, given: &str) -> Option<RedirectUrl> {
        // The URL parser removes tabs and newlines and resolves dot segments,
        // so the rule reads the text as given.
        if has_forbidden_control(given, Lines::Single) || has_dot_segment(given.trim()) {
            return None;
        }
        let candidate = RedirectUrl::parse(given).ok()?;
        let (registered, url) = (&self.0, &candidate.0);
        let loopback = registered.scheme() == "http"
            && matches!(
                registered.host(),
                Some(Host::Ipv4(ip)) if ip == Ipv4Addr::LOCALHOST
            )
            || registered.scheme() == "http"
                && matches!(registered.host(), Some(Host::Ipv6(ip)) if ip == Ipv6Addr::LOCALHOST);
        let same_origin = registered.scheme() == url.scheme()
            && registered.host() == url.host()
            && (loopback || registered.port_or_known_default() == url.port_or_known_default());
        (same_origin && path_within(registered.path(), url.path())).then_some(candidate)
    }
}

/// `path` is `base` or below it at a segment boundary: `/cb` holds `/cb` and
/// `/cb/done`, not `/cbx`.
fn path_within(base: &str, path: &str) -> bool {
    match path.strip_prefix(base) {
        Some(rest) => rest.is_empty() || base.ends_with('/') || rest.starts_with('/'),
        None => false,
    }
}

/// Whether the path of a URL, as written, has a `.` or `..` segment, literal
/// or percent-encoded (at any depth of encoding). Backslashes count as slashes,
/// as browsers read them in http(s) URLs.
fn has_dot_segment(raw: &str) -> bool {
    let after_scheme = raw.split_once(':').map_or(raw, |(_, rest)| rest);
    let after_slashes = after_scheme.trim_start_matches(['/', '\\']);
    let Some(start) = after_slashes.find(['/', '\\', '?', '#']) else {
        return false;
    };
    let from_path = &after_slashes[start..];
    let path = from_path.split(['?', '#']).next().unwrap_or("");
    path.split(['/', '\\']).any(|segment| {
        let mut text = segment.to_owned();
        // Each round removes one layer of encoding; a few are plenty.
        for _ in 0..4 {
            if text
                .split(['/', '\\'])
                .any(|part| part == "." || part == "..")
            {
                return true;
            }
            let decoded = percent_decode_str(&text).decode_utf8_lossy().into_owned();
            if decoded == text {
                return false;
            }
            text = decoded;
        }
        true
    })
}

impl fmt::Display for RedirectUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_urls_are_http_or_https_without_fragments() {
        assert!(RedirectUrl::parse("https://app.example.com/callback?x=1").is_ok());
        assert!(RedirectUrl::parse("http://127.0.0.1:3000/cb").is_ok());
        for (bad, error) in [
            ("not a url", RedirectUrlError::Malformed),
            ("/callback", RedirectUrlError::Malformed),
            ("ftp://example.com/cb", RedirectUrlError::Scheme),
            ("javascript:alert(1)", RedirectUrlError::Scheme),
            ("https://example.com/cb#frag", RedirectUrlError::Fragment),
            ("https://u:p@example.com/cb", RedirectUrlError::Credentials),
        ] {
            assert_eq!(RedirectUrl::parse(bad), Err(error), "{bad}");
        }
    }

    /// Whether `registered` lets a request name `given` as its redirect URL.
    fn admits(registered: &str, given: &str) -> bool {
        let Ok(registered) = RedirectUrl::parse(registered) else {
            panic!("{registered} is a valid redirect URL");
        };
        registered.admits_override(given).is_some()
    }

    #[test]
    fn an_override_keeps_the_origin_and_stays_below_the_registered_path() {
        // Most cases are overrides of one registered URL.
        let registered = "https://app.example/cb";
        for given in [
            "https://app.example/cb",
            "https://app.example/cb/done",
            "https://app.example/cb?x=1",
            "https://APP.example/cb",
            "https://app.example:443/cb",
            "https://app.example/cb/a.b/..c",
        ] {
            assert!(admits(registered, given), "{registered} <- {given}");
        }
        for given in [
            "https://app.example/cbx",
            "https://app.example/other",
            "https://app.example/",
            "https://app.example/CB",
            "https://app.example/cb%2fx",
            "https://app.example/cb/../other",
            "https://app.example/cb/./x",
            "https://app.example/cb/..",
            "https://app.example/cb/%2e%2e/x",
            "https://app.example/cb/%2E./x",
            "https://app.example/cb/.%2e",
            "https://app.example/cb/%2e",
            "https://app.example/cb/%252e%252e/x",
            "https://app.example/cb/%2e%2e%2fx",
            "https://app.example/cb\\..\\x",
            "https://app.example/cb/done#",
            "https://app.example/cb#x",
            "http://app.example/cb",
            "https://app.example:8443/cb",
            "https://evil.example/cb",
            "https://app.example.evil.example/cb",
            "https://u@app.example/cb",
            "https://app.example/cb/\tx",
            "/cb",
        ] {
            assert!(!admits(registered, given), "{registered} <- {given}");
        }
        // Other registered URLs: overrides they admit, then ones they refuse.
        for (registered, given) in [
            ("https://app.example/cb?a=1", "https://app.example/cb/x?b=2"),
            ("https://app.example/", "https://app.example/anything"),
            ("https://app.example", "https://app.example/anything"),
            ("https://app.example/cb/", "https://app.example/cb/x"),
            ("http://127.0.0.1/cb", "http://127.0.0.1:53127/cb"),
            ("http://127.0.0.1:8000/cb", "http://127.0.0.1:9/cb/x"),
            ("http://[::1]/cb", "http://[::1]:61000/cb"),
            ("http://localhost:8000/cb", "http://localhost:8000/cb/x"),
        ] {
            assert!(admits(registered, given), "{registered} <- {given}");
        }
        for (registered, given) in [
            ("https://app.example/cb/", "https://app.example/cb"),
            ("http://127.0.0.1:8000/cb", "http://127.0.0.1:9/other"),
            ("http://127.0.0.1:8000/cb", "https://127.0.0.1:8000/cb"),
            ("http://127.0.0.1:8000/cb", "http://127.0.0.2:8000/cb"),
            ("http://[::1]:80/cb", "http://127.0.0.1:80/cb"),
            ("http://localhost:8000/cb", "http://localhost:9000/cb"),
            ("https://127.0.0.1:8000/cb", "https://127.0.0.1:9000/cb"),
        ] {
            assert!(!admits(registered, given), "{registered} <- {given}");
        }
    }
}
