//! `tally demo`: demo users, friendships, balances and one app, created once.

use crate::accounts::{self, CreateAccountError, NewAccount};
use crate::auth::password::{PasswordHasher, Requester};
use crate::domain::{now_micros, Amount, Email, Password, Phone, Username};
use crate::ledger;
use crate::oauth::credentials::{self, CredentialKind};
use crate::store::{AppUpdate, NewApp, Store, UserKey};
use secrecy::{ExposeSecret, SecretString};

pub const DEMO_PASSWORD: &str = "tally-demo-password";
pub const DEMO_CLIENT_ID: &str = "tally-demo-app";

struct DemoUser {
    username: &'static str,
    first_name: &'static str,
    last_name: &'static str,
    email: &'static str,
    phone: &'static str,
    deposit: &'static str,
}

const USERS: [DemoUser; 3] = [
    DemoUser {
        username: "alice",
        first_name: "Alice",
        last_name: "Archer",
        email: "alice@example.com",
        phone: "+12125550101",
        deposit: "500.00",
    },
    DemoUser {
        username: "bob",
        first_name: "Bob",
        last_name: "Baker",
        email: "bob@example.com",
        phone: "+12125550102",
        deposit: "250.00",
    },
    DemoUser {
        username: "carol",
        first_name: "Carol",
        last_name: "Carter",
        email: "carol@example.com",
        phone: "+12125550103",
        deposit: "100.00",
    },
];

/// What `tally demo` prints.
pub struct DemoCredentials {
    pub usernames: Vec<&'static str>,
    pub password: &'static str,
    pub client_id: &'static str,
    pub client_secret: SecretString,
    pub redirect_url: String,
    /// A client-side authorization request for every scope of the demo app.
    pub authorize_url: String,
}

impl DemoCredentials {
    pub fn print(&self, origin: &str) {
        println!("Tally demo is running at {origin}");
        println!(
            "  users:         {} (password: {})",
            self.usernames.join(", "),
            self.password
        );
        println!("  client_id:     {}", self.client_id);
        println!("  client_secret: {}", self.client_secret.expose_secret());
        println!("  redirect_url:  {}", self.redirect_url);
        println!("Open this in a browser to sign in as a demo user and authorize the demo app:");
        println!("  {}", self.authorize_url);
    }
}

/// Creates whatever demo data is missing; running it again creates nothing new.
/// The demo app gets a fresh client secret on every start, so it can be printed
/// each time while only its digest is stored (and a copy of the database yields
/// none).
pub async fn seed(
    store: &dyn Store,
    hasher: &PasswordHasher,
    public_origin: &str,
) -> anyhow::Result<DemoCredentials> {
    let mut ids = Vec::new();
    for demo in &USERS {
        let existing = store.find_user(UserKey::Username(demo.username)).await?;
        let user = match existing {
            Some(user) => user,
            None => {
                let created = accounts::create(
                    store,
                    hasher,
                    &Requester::default(),
                    NewAccount {
                        username: Username::parse(demo.username)?,
                        password: Password::parse(DEMO_PASSWORD)?,
                        first_name: demo.first_name.to_owned(),
                        last_name: demo.last_name.to_owned(),
                        email: Some(Email::parse(demo.email)?),
                        phone: Some(Phone::parse(demo.phone)?),
                        about: format!("{} is a demo user.", demo.first_name),
                        verified: true,
                    },
                )
                .await;
                match created {
                    Ok(user) => {
                        ledger::deposit(store, &user.id, Amount::parse_positive(demo.deposit)?)
                            .await?;
                        user
                    }
                    // Another process seeded it meanwhile.
                    Err(CreateAccountError::Taken(_)) => store
                        .find_user(UserKey::Username(demo.username))
                        .await?
                        .ok_or_else(|| anyhow::anyhow!("demo user vanished"))?,
                    Err(e) => return Err(e.into()),
                }
            }
        };
        ids.push(user.id);
    }
    if let [alice, bob, carol] = ids.as_slice() {
        store.add_friendship(alice, bob, now_micros()).await?;
        store.add_friendship(alice, carol, now_micros()).await?;
    }

    let secret = credentials::generate(CredentialKind::ClientSecret);
    let redirect_url = format!("{public_origin}/demo/callback");
    let details = AppUpdate {
        name: "Tally Demo App".to_owned(),
        description: "An app to try Tally's OAuth flows with.".to_owned(),
        redirect_url: Some(redirect_url.clone()),
        site_url: Some(public_origin.to_owned()),
    };
    match store.find_app(DEMO_CLIENT_ID).await? {
        // The origin may differ from the last run's: keep the redirect URL on it.
        Some(app) => {
            store
                .replace_app_secret(&app.owner_id, DEMO_CLIENT_ID, &secret.digest)
                .await?;
            store
                .update_own_app(&app.owner_id, DEMO_CLIENT_ID, &details)
                .await?;
        }
        None => {
            let owner = ids.first().cloned().unwrap_or_default();
            store
                .insert_app(&NewApp {
                    client_id: DEMO_CLIENT_ID.to_owned(),
                    secret_digest: secret.digest.clone(),
                    name: details.name,
                    description: details.description,
                    redirect_url: details.redirect_url,
                    site_url: details.site_url,
                    owner_id: owner,
                    created_at: now_micros(),
                })
                .await?;
        }
    }
    Ok(DemoCredentials {
        usernames: USERS.iter().map(|u| u.username).collect(),
        password: DEMO_PASSWORD,
        client_id: DEMO_CLIENT_ID,
        client_secret: secret.secret,
        authorize_url: format!(
            "{public_origin}/v1/oauth/authorize?client_id={DEMO_CLIENT_ID}&response_type=token&scope=make_payments+access_profile+access_balance+access_friends+access_email+access_phone&state=demo"
        ),
        redirect_url,
    })
}
