//! Request parameters from the query string, form fields or a JSON object
//! (SPEC §2), merged into one map. Parsed once per request and kept in its
//! extensions, so `Params` and `Principal` can both be extracted.

use super::ApiError;
use crate::domain::{has_forbidden_control, Lines};
use crate::state::MAX_BODY_BYTES;
use actix_web::dev::Payload;
use actix_web::http::header::CONTENT_TYPE;
use actix_web::{FromRequest, HttpMessage, HttpRequest};
use futures_util::StreamExt;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

/// One parameter value. JSON numbers keep their literal text so that amounts
/// never pass through a float.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    Text(String),
    Number(String),
    Bool(bool),
    Null,
    /// An array or object, which no parameter takes.
    Structured,
}

impl ParamValue {
    /// The same value, however it came: `amount=1` in a query string and
    /// `"amount": 1` in JSON agree.
    fn same_as(&self, other: &ParamValue) -> bool {
        match (self, other) {
            (Self::Text(a) | Self::Number(a), Self::Text(b) | Self::Number(b)) => a == b,
            _ => self == other,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Params(Rc<HashMap<String, ParamValue>>);

impl Params {
    pub fn get(&self, name: &str) -> Option<&ParamValue> {
        self.0.get(name)
    }

    pub fn contains(&self, name: &str) -> bool {
        matches!(self.get(name), Some(v) if *v != ParamValue::Null)
    }

    /// A text parameter. Absent or null is `None`; a JSON number, true/false,
    /// an array or an object is the wrong type.
    pub fn text(&self, name: &str) -> Result<Option<&str>, ApiError> {
        match self.get(name) {
            None | Some(ParamValue::Null) => Ok(None),
            Some(ParamValue::Text(s)) => Ok(Some(s)),
            Some(_) => Err(ApiError::InvalidRequest(format!(
                "parameter {name} must be a string"
            ))),
        }
    }

    /// A parameter that may be a string or a JSON number (kept as its literal):
    /// limits, offsets, and OAuth client ids old clients send as numbers.
    pub fn text_or_number(&self, name: &str) -> Result<Option<&str>, ApiError> {
        match self.get(name) {
            None | Some(ParamValue::Null) => Ok(None),
            Some(ParamValue::Text(s) | ParamValue::Number(s)) => Ok(Some(s)),
            Some(_) => Err(ApiError::InvalidRequest(format!(
                "parameter {name} must be a string or a number"
            ))),
        }
    }

    /// A parameter that must be present (and not blank).
    pub fn required(&self, name: &'static str) -> Result<&str, ApiError> {
        match self.text(name)? {
            Some(value) if !value.trim().is_empty() => Ok(value),
            _ => Err(ApiError::MissingParameter(name)),
        }
    }

    /// Reads the parameters of a request, once; later calls reuse them.
    pub async fn extract(req: &HttpRequest, payload: &mut Payload) -> Result<Params, ApiError> {
        if let Some(params) = req.extensions().get::<Params>() {
            return Ok(params.clone());
        }
        let sent = read_as_sent(req, payload).await?;
        if let Some(key) = sent.repeated_json_key {
            return Err(ApiError::InvalidRequest(format!(
                "parameter {key} is given twice in the JSON object"
            )));
        }
        let mut map = HashMap::new();
        for (key, value) in sent.pairs {
            merge(&mut map, key, value)?;
        }
        refuse_control_characters(req, &map)?;
        let params = Params(Rc::new(map));
        req.extensions_mut().insert(params.clone());
        Ok(params)
    }
}

/// A request's parameters as sent: the query string's, then the body's, in
/// order, repeats kept. The OAuth endpoints judge repeats by their own rule
/// (SPEC §6); `Params` refuses the ambiguous ones.
pub struct SentParams {
    pub pairs: Vec<(String, ParamValue)>,
    /// A key a JSON body gives twice (it is in `pairs` twice).
    pub repeated_json_key: Option<String>,
}

/// Reads the query string and the body (form fields or a JSON object).
pub async fn read_as_sent(
    req: &HttpRequest,
    payload: &mut Payload,
) -> Result<SentParams, ApiError> {
    let mut pairs = parse_form(req.query_string().as_bytes());
    let mut repeated_json_key = None;
    let body = read_body(payload).await?;
    if !body.is_empty() {
        let content_type = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match content_type.as_str() {
            "application/x-www-form-urlencoded" => pairs.extend(parse_form(&body)),
            "application/json" => {
                let (members, repeated) = parse_json(&body)?;
                pairs.extend(members);
                repeated_json_key = repeated;
            }
            _ => return Err(ApiError::UnsupportedMediaType),
        }
    }
    Ok(SentParams {
        pairs,
        repeated_json_key,
    })
}

/// The free-text parameters, where tab, CR and LF are allowed (SPEC §2).
const MULTI_LINE_PARAMETERS: &[&str] = &["note", "about"];

/// SPEC §2: a control character in any parameter, its name or a path segment
/// (`/users/{user_id}`) is 400 `invalid_request`, decided here, where every
/// parameter of every endpoint passes, before the token is even looked at, so
/// no database ever sees one.
fn refuse_control_characters(
    req: &HttpRequest,
    map: &HashMap<String, ParamValue>,
) -> Result<(), ApiError> {
    let refused =
        |what: &str| ApiError::InvalidRequest(format!("{what} holds a control character"));
    for (name, value) in map {
        if has_forbidden_control(name, Lines::Single) {
            return Err(refused("a parameter name"));
        }
        let lines = if MULTI_LINE_PARAMETERS.contains(&name.as_str()) {
            Lines::Multi
        } else {
            Lines::Single
        };
        if let ParamValue::Text(text) = value {
            if has_forbidden_control(text, lines) {
                return Err(refused(&format!("parameter {name}")));
            }
        }
    }
    for (name, segment) in req.match_info().iter() {
        if has_forbidden_control(segment, Lines::Single) {
            return Err(refused(&format!("the path segment {name}")));
        }
    }
    Ok(())
}

/// Adds one parameter. The same name twice with different values (in the query,
/// the body, or across them) is ambiguous, so it is refused rather than guessed.
fn merge(
    map: &mut HashMap<String, ParamValue>,
    key: String,
    value: ParamValue,
) -> Result<(), ApiError> {
    match map.get(&key) {
        Some(existing) if !existing.same_as(&value) => Err(ApiError::InvalidRequest(format!(
            "parameter {key} is given twice with different values"
        ))),
        _ => {
            map.insert(key, value);
            Ok(())
        }
    }
}

async fn read_body(payload: &mut Payload) -> Result<Vec<u8>, ApiError> {
    let mut body = Vec::new();
    while let Some(chunk) = payload.next().await {
        let chunk =
            chunk.map_err(|e| ApiError::InvalidRequest(format!("cannot read the body: {e}")))?;
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(ApiError::PayloadTooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn parse_form(body: &[u8]) -> Vec<(String, ParamValue)> {
    url::form_urlencoded::parse(body)
        .map(|(k, v)| (k.into_owned(), ParamValue::Text(v.into_owned())))
        .collect()
}

/// A JSON object's members in order, and a key it gives twice, if any.
type JsonMembers = (Vec<(String, ParamValue)>, Option<String>);

fn parse_json(body: &[u8]) -> Result<JsonMembers, ApiError> {
    let object: Members = serde_json::from_slice(body)
        .map_err(|_| ApiError::InvalidRequest("the body must be a JSON object".to_owned()))?;
    let members = object
        .members
        .into_iter()
        .map(|(key, raw)| {
            let text = raw.get().trim();
            let value = match text.as_bytes().first() {
                Some(b'"') => ParamValue::Text(serde_json::from_str(text).map_err(|_| {
                    ApiError::InvalidRequest(format!("parameter {key} is not a valid string"))
                })?),
                Some(b'-' | b'0'..=b'9') => ParamValue::Number(text.to_owned()),
                Some(b't') => ParamValue::Bool(true),
                Some(b'f') => ParamValue::Bool(false),
                Some(b'n') => ParamValue::Null,
                _ => ParamValue::Structured,
            };
            Ok((key, value))
        })
        .collect::<Result<_, ApiError>>()?;
    Ok((members, object.duplicate))
}

/// A JSON object's members, noting a key given twice, which serde_json's own
/// maps would silently resolve to the last value.
struct Members {
    members: Vec<(String, Box<RawValue>)>,
    duplicate: Option<String>,
}

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor;
        impl<'de> Visitor<'de> for ObjectVisitor {
            type Value = Members;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut seen = HashSet::new();
                let mut object = Members {
                    members: Vec::new(),
                    duplicate: None,
                };
                while let Some((key, value)) = map.next_entry::<String, Box<RawValue>>()? {
                    if !seen.insert(key.clone()) && object.duplicate.is_none() {
                        object.duplicate = Some(key.clone());
                    }
                    object.members.push((key, value));
                }
                Ok(object)
            }
        }
        deserializer.deserialize_map(ObjectVisitor)
    }
}

/// The body of a request, shared by its extractors. actix calls every
/// extractor's `from_request` before polling any of them, so only the first one
/// sees the payload; it leaves it here, and whichever future runs first parses it
/// while the others wait and then reuse the cached `Params`.
#[derive(Clone)]
pub struct BodySlot(Rc<tokio::sync::Mutex<Option<Payload>>>);

impl BodySlot {
    /// The request's slot, creating it with the payload on the first call.
    pub fn of(req: &HttpRequest, payload: &mut Payload) -> Self {
        if let Some(slot) = req.extensions().get::<BodySlot>() {
            return slot.clone();
        }
        let slot = BodySlot(Rc::new(tokio::sync::Mutex::new(Some(payload.take()))));
        req.extensions_mut().insert(slot.clone());
        slot
    }

    /// The request's parameters, parsed once.
    pub async fn params(&self, req: &HttpRequest) -> Result<Params, ApiError> {
        let mut body = self.0.lock().await;
        let cached = req.extensions().get::<Params>().cloned();
        if let Some(params) = cached {
            return Ok(params);
        }
        let mut payload = body.take().unwrap_or(Payload::None);
        Params::extract(req, &mut payload).await
    }
}

impl FromRequest for Params {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let req = req.clone();
        let slot = BodySlot::of(&req, payload);
        Box::pin(async move { slot.params(&req).await })
    }
}
