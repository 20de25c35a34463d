//! A user and a registered app to authorize, made through the operator code.

use crate::helpers::TestApp;
use tally::admin;
use tally::auth::password::PasswordHasher;

pub const PASSWORD: &str = "correct horse battery";

#[derive(Clone)]
pub struct Fixture {
    pub user_id: String,
    pub username: String,
    pub client_id: String,
    pub client_secret: String,
    pub redirect_url: String,
}

pub async fn fixture(app: &TestApp) -> Fixture {
    fixture_with_redirect(app, "https://app.example.com/callback?app=1").await
}

pub async fn fixture_with_redirect(app: &TestApp, redirect_url: &str) -> Fixture {
    let store = app.store.as_ref();
    let username = format!("user{}", &tally::domain::new_id()[24..]);
    let user = admin::user_add(
        store,
        &PasswordHasher::new(2),
        admin::UserAdd {
            username: username.clone(),
            password: PASSWORD.to_owned(),
            first_name: Some("Ann".to_owned()),
            last_name: Some("Lee".to_owned()),
            email: Some(format!("{username}@example.com")),
            verified: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    admin::deposit(store, &username, "25.00").await.unwrap();
    let created = admin::app_add(
        store,
        admin::AppAdd {
            owner: username.clone(),
            name: "Splitter".to_owned(),
            redirect_url: redirect_url.to_owned(),
            description: Some("Splits bills".to_owned()),
            site_url: Some("app.example.com".to_owned()),
        },
    )
    .await
    .unwrap();
    Fixture {
        user_id: user.id,
        username,
        client_id: created.client_id,
        client_secret: created.client_secret,
        redirect_url: redirect_url.to_owned(),
    }
}

impl Fixture {
    pub fn authorize_url(&self, extra: &[(&str, &str)]) -> String {
        let mut url = url::Url::parse("http://placeholder/v1/oauth/authorize").unwrap();
        url.query_pairs_mut()
            .append_pair("client_id", &self.client_id);
        for (k, v) in extra {
            url.query_pairs_mut().append_pair(k, v);
        }
        format!("/v1/oauth/authorize?{}", url.query().unwrap())
    }
}
