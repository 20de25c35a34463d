//! A scripted browser for the pages: keeps cookies, reads forms, posts them with
//! an `Origin` as browsers do, and never follows redirects by itself.

use reqwest::header::{HeaderMap, LOCATION, ORIGIN};
use reqwest::StatusCode;
use scraper::{Html, Selector};
use std::net::IpAddr;

pub struct Browser {
    pub client: reqwest::Client,
    pub origin: String,
    jar: std::sync::Arc<reqwest::cookie::Jar>,
}

pub struct Page {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Page {
    pub fn location(&self) -> Option<String> {
        self.headers
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }

    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    }

    /// The fields of the page's form whose action contains `action`, with the
    /// values a person would send unchanged (buttons excluded).
    pub fn form(&self, action: &str) -> Vec<(String, String)> {
        let html = Html::parse_document(&self.body);
        let forms = Selector::parse("form").unwrap();
        let inputs = Selector::parse("input").unwrap();
        let form = html
            .select(&forms)
            .find(|f| f.value().attr("action").is_some_and(|a| a.contains(action)))
            .unwrap_or_else(|| panic!("no form posting to {action} in {}", self.body));
        form.select(&inputs)
            .filter_map(|i| {
                // A browser sends only the checked radio buttons and boxes.
                let kind = i.value().attr("type").unwrap_or("text");
                if matches!(kind, "radio" | "checkbox") && i.value().attr("checked").is_none() {
                    return None;
                }
                let name = i.value().attr("name")?;
                Some((
                    name.to_owned(),
                    i.value().attr("value").unwrap_or("").to_owned(),
                ))
            })
            .collect()
    }

    pub fn text(&self) -> String {
        Html::parse_document(&self.body)
            .root_element()
            .text()
            .collect::<Vec<_>>()
            .join(" ")
    }
}

impl Browser {
    pub fn new(origin: &str) -> Self {
        Self::from(origin, None)
    }

    /// A browser whose connections come from another loopback address.
    pub fn from(origin: &str, local_address: Option<IpAddr>) -> Self {
        let jar = std::sync::Arc::new(reqwest::cookie::Jar::default());
        let client = reqwest::Client::builder()
            .cookie_provider(jar.clone())
            .redirect(reqwest::redirect::Policy::none())
            .local_address(local_address)
            .build()
            .unwrap();
        Self {
            client,
            origin: origin.to_owned(),
            jar,
        }
    }

    /// The `Cookie` header this browser sends, as someone copying it would.
    pub fn cookie_header(&self) -> String {
        use reqwest::cookie::CookieStore;
        let url = self.origin.parse().unwrap();
        self.jar
            .cookies(&url)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    }

    fn absolute(&self, url: &str) -> String {
        if url.starts_with('/') {
            format!("{}{url}", self.origin)
        } else {
            url.to_owned()
        }
    }

    pub async fn get(&self, url: &str) -> Page {
        let response = self.client.get(self.absolute(url)).send().await.unwrap();
        Self::page(response).await
    }

    pub async fn post(&self, url: &str, fields: &[(String, String)]) -> Page {
        let response = self
            .client
            .post(self.absolute(url))
            .header(ORIGIN, &self.origin)
            .form(fields)
            .send()
            .await
            .unwrap();
        Self::page(response).await
    }

    async fn page(response: reqwest::Response) -> Page {
        Page {
            status: response.status(),
            headers: response.headers().clone(),
            body: response.text().await.unwrap(),
        }
    }

    /// Signs in on the sign-in form `page` shows; returns the answer (a 303).
    pub async fn sign_in(&self, page: &Page, username: &str, password: &str) -> Page {
        let mut fields = page.form("/signin");
        set(&mut fields, "username", username);
        set(&mut fields, "password", password);
        self.post("/signin", &fields).await
    }

    /// Follows an authorize URL through sign-in to the consent page.
    pub async fn to_consent(&self, authorize_url: &str, username: &str, password: &str) -> Page {
        let page = self.get(authorize_url).await;
        assert_eq!(page.status, 200, "{}", page.body);
        // The consent page, or a 303 to the app when consent is remembered.
        let signed_in = self.sign_in(&page, username, password).await;
        assert_eq!(signed_in.status, 303, "{}", signed_in.body);
        let next = signed_in.location().unwrap();
        self.get(&next).await
    }

    /// Answers a consent page with `allow` or `deny`; returns the 303 to the app.
    pub async fn decide(&self, consent: &Page, decision: &str) -> Page {
        let mut fields = consent.form("/v1/oauth/authorize");
        fields.push(("decision".to_owned(), decision.to_owned()));
        self.post("/v1/oauth/authorize", &fields).await
    }
}

pub fn set(fields: &mut Vec<(String, String)>, name: &str, value: &str) {
    fields.retain(|(n, _)| n != name);
    fields.push((name.to_owned(), value.to_owned()));
}

/// The query parameters of a URL.
pub fn query_of(url: &str) -> std::collections::HashMap<String, String> {
    url::Url::parse(url)
        .unwrap()
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}
