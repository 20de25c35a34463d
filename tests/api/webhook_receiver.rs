//! A webhook receiver on loopback for the tests: a small HTTP/1.1 server on
//! its own port that keeps every request it gets and answers each as it is
//! told (a status, a `Location`, a body, a delay), and verifies signatures
//! with the Standard Webhooks reference library (`standardwebhooks`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Received {
    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    }

    pub fn id(&self) -> String {
        self.header("webhook-id")
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap()
    }

    /// Whether the reference library accepts its signature under `secret`.
    pub fn verifies_with(&self, secret: &str) -> bool {
        standardwebhooks::Webhook::new(secret)
            .unwrap()
            .verify(self.body.as_bytes(), &self.headers)
            .is_ok()
    }
}

/// How to answer one request.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub location: Option<String>,
    pub body_bytes: usize,
    pub delay: Duration,
    /// The `content-length` announced, when more than `body_bytes`: the
    /// rest never comes, and the connection stays open this long.
    pub announced: Option<(usize, Duration)>,
}

impl Reply {
    pub fn status(status: u16) -> Self {
        Self {
            status,
            location: None,
            body_bytes: 0,
            delay: Duration::ZERO,
            announced: None,
        }
    }
}

pub struct Receiver {
    pub port: u16,
    received: Arc<Mutex<Vec<Received>>>,
    replies: Arc<Mutex<VecDeque<Reply>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    /// A receiver answering 200 to everything not planned otherwise.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let replies = Arc::new(Mutex::new(VecDeque::new()));
        let (r, p) = (received.clone(), replies.clone());
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let (r, p) = (r.clone(), p.clone());
                tokio::spawn(async move {
                    let _ = serve(socket, r, p).await;
                });
            }
        });
        Self {
            port,
            received,
            replies,
            task,
        }
    }

    /// The URL of `path` on this receiver (http, loopback).
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Answers the next requests so, in order.
    pub fn plan(&self, replies: impl IntoIterator<Item = Reply>) {
        self.replies.lock().unwrap().extend(replies);
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Waits (boundedly) until `done` holds of what was received; returns it.
    pub async fn wait_until(
        &self,
        within: Duration,
        done: impl Fn(&[Received]) -> bool,
    ) -> Vec<Received> {
        let started = std::time::Instant::now();
        loop {
            let got = self.received();
            if done(&got) {
                return got;
            }
            assert!(
                started.elapsed() < within,
                "the receiver did not get what was awaited within {within:?}; it got: {:#?}",
                got.iter()
                    .map(|r| (r.id(), r.body.clone()))
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until an event of `kind` about `payment_id` arrived; returns it.
    pub async fn event(&self, kind: &str, payment_id: &str) -> Received {
        let matches = |r: &Received| {
            let body = r.json();
            body["type"] == kind && body["data"]["id"] == payment_id
        };
        let got = self
            .wait_until(Duration::from_secs(20), |all| all.iter().any(matches))
            .await;
        got.into_iter().find(matches).unwrap()
    }
}

async fn serve(
    mut socket: tokio::net::TcpStream,
    received: Arc<Mutex<Vec<Received>>>,
    replies: Arc<Mutex<VecDeque<Reply>>>,
) -> std::io::Result<()> {
    let mut data = Vec::new();
    let mut buffer = [0u8; 8192];
    let head_end = loop {
        let n = socket.read(&mut buffer).await?;
        if n == 0 {
            return Ok(());
        }
        data.extend_from_slice(&buffer[..n]);
        if let Some(at) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let path = request_line
        .split(' ')
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    let mut headers = reqwest::header::HeaderMap::new();
    for line in lines.filter(|l| !l.is_empty()) {
        if let Some((name, value)) = line.split_once(':') {
            if let (Ok(name), Ok(value)) = (
                reqwest::header::HeaderName::from_bytes(name.trim().as_bytes()),
                reqwest::header::HeaderValue::from_str(value.trim()),
            ) {
                headers.append(name, value);
            }
        }
    }
    let length: usize = headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while data.len() < head_end + length {
        let n = socket.read(&mut buffer).await?;
        if n == 0 {
            break;
        }
        data.extend_from_slice(&buffer[..n]);
    }
    let body = String::from_utf8_lossy(&data[head_end..]).into_owned();
    received.lock().unwrap().push(Received {
        path,
        headers,
        body,
    });
    let reply = replies
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or(Reply::status(200));
    tokio::time::sleep(reply.delay).await;
    let length = reply
        .announced
        .map_or(reply.body_bytes, |(length, _)| length);
    let mut answer = format!(
        "HTTP/1.1 {} X\r\ncontent-length: {length}\r\nconnection: close\r\n",
        reply.status
    );
    if let Some(location) = &reply.location {
        answer.push_str(&format!("location: {location}\r\n"));
    }
    answer.push_str("\r\n");
    socket.write_all(answer.as_bytes()).await?;
    if reply.body_bytes > 0 {
        socket.write_all(&vec![b'x'; reply.body_bytes]).await?;
    }
    if let Some((_, open)) = reply.announced {
        socket.flush().await?;
        tokio::time::sleep(open).await;
    }
    socket.shutdown().await
}
