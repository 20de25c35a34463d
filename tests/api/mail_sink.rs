//! A tiny SMTP server that accepts every message and keeps it, so the SMTP
//! mailer is tested end to end without a real mail server.

use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

#[derive(Debug, Clone)]
pub struct Mail {
    pub rcpt_to: Vec<String>,
    pub data: String,
}

pub struct MailSink {
    pub url: String,
    mails: Arc<Mutex<Vec<Mail>>>,
}

impl MailSink {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("smtp://{}", listener.local_addr().unwrap());
        let mails = Arc::new(Mutex::new(Vec::new()));
        let kept = mails.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let kept = kept.clone();
                tokio::spawn(async move {
                    let _ = serve(stream, kept).await;
                });
            }
        });
        Self { url, mails }
    }

    pub fn mails(&self) -> Vec<Mail> {
        self.mails.lock().unwrap().clone()
    }

    /// The verification token in the latest mail to `to`, waiting a little for it.
    pub async fn token_for(&self, to: &str) -> String {
        for _ in 0..50 {
            let found = self
                .mails()
                .into_iter()
                .rev()
                .find(|m| m.rcpt_to.iter().any(|r| r.contains(to)))
                .and_then(|m| verification_token(&m.data));
            if let Some(token) = found {
                return token;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("no verification mail reached {to}: {:?}", self.mails());
    }
}

/// The `tly_verify_…` token in a message, undoing quoted-printable line breaks.
pub fn verification_token(text: &str) -> Option<String> {
    let joined = text.replace("=\r\n", "").replace("=\n", "");
    let start = joined.find("tly_verify_")?;
    let token: String = joined[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    Some(token)
}

async fn serve(stream: tokio::net::TcpStream, mails: Arc<Mutex<Vec<Mail>>>) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    write.write_all(b"220 sink ESMTP\r\n").await?;
    let mut rcpt_to = Vec::new();
    while let Some(line) = lines.next_line().await? {
        let upper = line.to_ascii_uppercase();
        let reply: &[u8] = if upper.starts_with("EHLO") || upper.starts_with("HELO") {
            b"250 sink\r\n"
        } else if upper.starts_with("RCPT TO") {
            rcpt_to.push(line[8..].trim().to_owned());
            b"250 OK\r\n"
        } else if upper.starts_with("DATA") {
            write.write_all(b"354 go on\r\n").await?;
            let mut data = String::new();
            while let Some(line) = lines.next_line().await? {
                if line == "." {
                    break;
                }
                data.push_str(&line);
                data.push('\n');
            }
            mails.lock().unwrap().push(Mail {
                rcpt_to: std::mem::take(&mut rcpt_to),
                data,
            });
            b"250 OK queued\r\n"
        } else if upper.starts_with("QUIT") {
            write.write_all(b"221 bye\r\n").await?;
            return Ok(());
        } else {
            // MAIL FROM, RSET, NOOP and the rest.
            b"250 OK\r\n"
        };
        write.write_all(reply).await?;
    }
    Ok(())
}
