use std::fmt;
use url::Url;

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
}
