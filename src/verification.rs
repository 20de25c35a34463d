//! Verifying an account's e-mail address or phone number with a link that works
//! once, for a day. The link's token is a credential like any other: 256 random
//! bits behind a prefix, stored only as a SHA-256 digest.

use crate::config::Settings;
use crate::domain::now_micros;
use crate::mailer::Mailer;
use crate::oauth::credentials;
use crate::store::{Channel, NewVerification, SendCount, SendLimits, Store, StoreError, User};
use std::net::IpAddr;
use std::time::Duration;

pub const LINK_TTL: Duration = Duration::from_secs(24 * 3600);
const PREFIX: &str = "tly_verify_";

/// Links to one address, whoever asks (SPEC §8): at most one a minute…
pub const SEND_GAP: Duration = Duration::from_secs(60);
/// …and ten a day.
pub const SENDS_PER_DAY: i64 = 10;
pub const SEND_WINDOW: Duration = Duration::from_secs(24 * 3600);
/// Links one client IP may cause, whatever addresses it names (SPEC §9)…
pub const SENDS_PER_IP: i64 = 20;
/// …in this span.
pub const IP_SEND_WINDOW: Duration = Duration::from_secs(3600);

/// What became of a request to send links: the one outcome every page tells.
/// A failure is logged where it happens; the change that asked for the links
/// stands either way, and the person can ask again.
#[derive(Debug)]
pub enum Links {
    Sent(Sent),
    Failed,
}

/// The links that went out, and the addresses that had to wait.
#[derive(Debug, Default)]
pub struct Sent {
    /// How many links went out.
    pub sent: usize,
    /// Addresses that had too many links lately, each with the first moment
    /// (microseconds) one may be sent again.
    pub held: Vec<(String, i64)>,
}

/// The addresses of `user` that still wait to be verified.
pub fn unverified_contacts(user: &User) -> Vec<(Channel, String)> {
    let mut contacts = Vec::new();
    if let Some(email) = user.email.as_ref().filter(|_| !user.email_verified) {
        contacts.push((Channel::Email, email.clone()));
    }
    if let Some(phone) = user.phone.as_ref().filter(|_| !user.phone_verified) {
        contacts.push((Channel::Phone, phone.clone()));
    }
    contacts
}

#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the link could not be sent")]
    Delivery(#[source] anyhow::Error),
}

/// The key an address's sends are counted under: one for all the ways of
/// writing it that reach one mailbox (SPEC §9): lower case, and for e-mail
/// without a `+tag` before the `@`. Phone numbers are already E.164.
pub fn send_key(channel: Channel, address: &str) -> String {
    let address = address.trim().to_lowercase();
    let address = match (channel, address.rsplit_once('@')) {
        (Channel::Email, Some((local, domain))) => {
            let local = local.split_once('+').map_or(local, |(base, _tag)| base);
            format!("{local}@{domain}")
        }
        _ => address,
    };
    format!("{}:{address}", channel.as_str())
}

/// The key the sends a client IP causes are counted under.
fn ip_send_key(from: IpAddr) -> String {
    format!("ip:{from}")
}

/// Sends a fresh link to every unverified address of `user` that has not had
/// too many lately, as long as the client IP `from` that asked has not caused
/// too many (the limits hold across instances: the store counts).
pub async fn send_links(
    store: &dyn Store,
    mailer: &Mailer,
    public_origin: &str,
    user: &User,
    from: IpAddr,
) -> Links {
    match try_send_links(store, mailer, public_origin, user, from).await {
        Ok(sent) => Links::Sent(sent),
        Err(error) => {
            tracing::error!(error = ?error, "cannot send verification links");
            Links::Failed
        }
    }
}

#[tracing::instrument(skip_all, fields(user_id = %user.id))]
async fn try_send_links(
    store: &dyn Store,
    mailer: &Mailer,
    public_origin: &str,
    user: &User,
    from: IpAddr,
) -> Result<Sent, SendError> {
    let per_address = SendLimits {
        min_gap: crate::domain::micros(SEND_GAP),
        window: crate::domain::micros(SEND_WINDOW),
        per_window: SENDS_PER_DAY,
    };
    let per_ip = SendLimits {
        min_gap: 0,
        window: crate::domain::micros(IP_SEND_WINDOW),
        per_window: SENDS_PER_IP,
    };
    let ip_key = ip_send_key(from);
    let mut outcome = Sent::default();
    for (channel, address) in &unverified_contacts(user) {
        let now = now_micros();
        let key = send_key(*channel, address);
        let counts = [
            SendCount {
                key: &key,
                limits: per_address,
            },
            SendCount {
                key: &ip_key,
                limits: per_ip,
            },
        ];
        if let Err(next) = store.reserve_verification_send(&counts, now).await? {
            outcome.held.push((address.clone(), next));
            continue;
        }
        let token = format!("{PREFIX}{}", credentials::random_hex(32));
        store
            .insert_verification(&NewVerification {
                digest: credentials::digest(&token),
                user_id: user.id.clone(),
                channel: *channel,
                address: address.clone(),
                created_at: now,
                expires_at: now.saturating_add(crate::domain::micros(LINK_TTL)),
            })
            .await?;
        let link = format!("{public_origin}/verify?token={token}");
        mailer
            .send_verification(*channel, address, &user.username, &link)
            .await
            .map_err(SendError::Delivery)?;
        outcome.sent += 1;
    }
    Ok(outcome)
}

/// Spends a link. `Some(user)` when it verified an address: payments waiting
/// for that address are then claimed by the account.
#[tracing::instrument(skip_all)]
pub async fn verify(
    store: &dyn Store,
    settings: &Settings,
    token: &str,
) -> Result<Option<User>, StoreError> {
    let token = token.trim();
    if !token.starts_with(PREFIX) {
        return Ok(None);
    }
    let user = match store
        .use_verification(&credentials::digest(token), now_micros())
        .await
    {
        Ok(Some(user)) => user,
        Ok(None) => return Ok(None),
        // Another account verified this address first: it is theirs now, and
        // this link cannot make it this account's.
        Err(StoreError::Conflict(_)) => return Ok(None),
        Err(other) => return Err(other),
    };
    on_contact_verified(store, &user, settings).await?;
    Ok(Some(user))
}

/// Called whenever an e-mail address or phone number of `user` has just become
/// verified: payments waiting for that address are claimed by the account
/// (SPEC §5). The one place that links verification to the ledger.
#[tracing::instrument(skip_all, fields(user_id = %user.id))]
async fn on_contact_verified(
    store: &dyn Store,
    user: &User,
    _settings: &Settings,
) -> Result<(), StoreError> {
    let claimed = crate::ledger::claim(store, user, now_micros()).await?;
    tracing::info!(
        email_verified = user.email_verified,
        phone_verified = user.phone_verified,
        claimed,
        "contact verified"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_that_reach_one_mailbox_share_a_send_key() {
        for (channel, address, key) in [
            (
                Channel::Email,
                "Victim+1@Example.com",
                "email:victim@example.com",
            ),
            (
                Channel::Email,
                "victim+a+b@example.com",
                "email:victim@example.com",
            ),
            (
                Channel::Email,
                "victim@example.com",
                "email:victim@example.com",
            ),
            (Channel::Phone, "+12125550187", "phone:+12125550187"),
        ] {
            assert_eq!(send_key(channel, address), key, "{address}");
        }
    }
}
