//! Sending verification links. By default a link is written to the server log,
//! on a line marked `VERIFY-LINK`, so a self-hosted instance works with no mail
//! server; with `TALLY_SMTP_URL` e-mail goes out through SMTP. Tally has no SMS
//! gateway: links for phone numbers always go to the log.

use crate::config::{Settings, SmtpSettings};
use crate::store::Channel;
use anyhow::Context;
use lettre::message::{header::ContentType, Mailbox};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use secrecy::ExposeSecret;

/// The marker of the log line that carries a link when no mail server is set.
pub const LOG_MARKER: &str = "VERIFY-LINK";

pub enum Mailer {
    Log,
    Smtp {
        transport: AsyncSmtpTransport<Tokio1Executor>,
        from: Mailbox,
    },
}

impl Mailer {
    pub fn from_settings(settings: &Settings) -> anyhow::Result<Self> {
        match &settings.smtp {
            None => Ok(Self::Log),
            Some(SmtpSettings { url, from }) => Ok(Self::Smtp {
                transport: AsyncSmtpTransport::<Tokio1Executor>::from_url(url.expose_secret())
                    .context("TALLY_SMTP_URL is not an SMTP URL")?
                    .build(),
                from: from.clone(),
            }),
        }
    }

    /// Sends a link that verifies `address` for `username`.
    #[tracing::instrument(skip_all, fields(channel = channel.as_str()))]
    pub async fn send_verification(
        &self,
        channel: Channel,
        address: &str,
        username: &str,
        link: &str,
    ) -> anyhow::Result<()> {
        match (self, channel) {
            (Self::Smtp { transport, from }, Channel::Email) => {
                let to: Mailbox = address.parse().context("the address is not a mailbox")?;
                let message = Message::builder()
                    .from(from.clone())
                    .to(to)
                    .subject("Verify your e-mail address for Tally")
                    .header(ContentType::TEXT_PLAIN)
                    .body(format!(
                        "Hello {username},\n\nOpen this link to verify your e-mail address \
                         for your Tally account:\n\n{link}\n\nThe link works once, for 24 hours. \
                         If you did not sign up for Tally, ignore this message.\n"
                    ))
                    .context("cannot build the message")?;
                transport
                    .send(message)
                    .await
                    .context("the SMTP server refused the message")?;
                tracing::info!("verification link sent by e-mail");
            }
            _ => {
                // The log is this channel's delivery: the link is meant to be read here.
                tracing::info!(
                    target: "tally::mail",
                    channel = channel.as_str(),
                    to = address,
                    username,
                    link,
                    "{LOG_MARKER} {link}"
                );
            }
        }
        Ok(())
    }
}
