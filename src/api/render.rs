//! The JSON shapes of SPEC §3 and the `data` / `pagination` envelope. Every field
//! is always written (`null` when it has no value). Money goes through `Money`'s
//! own serializer, so these structs are serialized directly, never through
//! `serde_json::Value`.

use crate::domain::{format_datetime, Money};
use crate::store::{Payment, Store, StoreError, User};
use actix_web::HttpResponse;
use serde::Serialize;
use std::collections::{HashMap, HashSet};

#[derive(Serialize)]
pub struct Data<T> {
    pub data: T,
}

#[derive(Serialize)]
pub struct Page<T> {
    pub data: Vec<T>,
    pub pagination: Pagination,
}

#[derive(Serialize)]
pub struct Pagination {
    /// The absolute URL of the next page, or null on the last page.
    pub next: Option<String>,
}

pub fn ok<T: Serialize>(data: T) -> HttpResponse {
    HttpResponse::Ok().json(Data { data })
}

/// The user object, wherever a user appears.
#[derive(Debug, Serialize)]
pub struct UserView {
    pub id: String,
    pub username: String,
    pub first_name: Option<String>,
    pub last_name: Option<String>,
    pub display_name: String,
    pub about: Option<String>,
    pub profile_picture_url: Option<String>,
    pub date_joined: String,
}

/// A stored text field as the API writes it: the store keeps an unset profile
/// field as `''`, and SPEC §2 writes a field without a value as `null`, never
/// `""`.
pub fn present(text: &str) -> Option<String> {
    (!text.trim().is_empty()).then(|| text.to_owned())
}

impl From<&User> for UserView {
    fn from(user: &User) -> Self {
        Self {
            id: user.id.clone(),
            username: user.username.clone(),
            first_name: present(&user.first_name),
            last_name: present(&user.last_name),
            display_name: crate::accounts::display_name(user),
            about: present(&user.about),
            profile_picture_url: user.profile_picture_url.as_deref().and_then(present),
            date_joined: format_datetime(user.date_joined),
        }
    }
}

#[derive(Serialize)]
pub struct TargetView {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub email: Option<String>,
    pub phone: Option<String>,
    pub user: Option<UserView>,
}

#[derive(Serialize)]
pub struct PaymentView {
    pub id: String,
    pub status: &'static str,
    pub action: &'static str,
    pub amount: Money,
    pub note: String,
    pub audience: &'static str,
    pub date_created: String,
    pub date_completed: Option<String>,
    pub actor: Option<UserView>,
    pub target: TargetView,
    /// Tally charges no fees.
    pub fee: Option<Money>,
    pub refund: Option<Box<PaymentView>>,
    pub medium: &'static str,
}

/// The users and refunds a set of payments mentions, loaded in two queries.
#[derive(Default)]
pub struct Related {
    users: HashMap<String, User>,
    refunds: HashMap<String, Payment>,
}

impl Related {
    pub async fn load(store: &dyn Store, payments: &[Payment]) -> Result<Self, StoreError> {
        Self::load_knowing(store, payments, None).await
    }

    /// `load`, given a user already read (the token owner, a party of every
    /// payment it sees), who is then not read again.
    pub async fn load_knowing(
        store: &dyn Store,
        payments: &[Payment],
        known: Option<&User>,
    ) -> Result<Self, StoreError> {
        let refund_ids: Vec<String> = payments
            .iter()
            .filter_map(|p| p.refund_payment_id.clone())
            .collect();
        let refunds = store.find_payments(&refund_ids).await?;
        let user_ids: HashSet<String> = payments
            .iter()
            .chain(refunds.iter())
            .flat_map(|p| [p.actor_id.clone(), p.target_user_id.clone()])
            .flatten()
            .filter(|id| known.is_none_or(|k| k.id != *id))
            .collect();
        let mut users = store
            .find_users(&user_ids.into_iter().collect::<Vec<_>>())
            .await?;
        users.extend(known.cloned());
        Ok(Self {
            users: users.into_iter().map(|u| (u.id.clone(), u)).collect(),
            refunds: refunds.into_iter().map(|r| (r.id.clone(), r)).collect(),
        })
    }

    /// The users of payments that have no refund, already at hand.
    pub fn of_users(users: Vec<User>) -> Self {
        Self {
            users: users.into_iter().map(|u| (u.id.clone(), u)).collect(),
            refunds: HashMap::new(),
        }
    }

    /// Adds a refund known without a look-up.
    pub fn with_refund(mut self, refund: Option<Payment>) -> Self {
        if let Some(refund) = refund {
            self.refunds.insert(refund.id.clone(), refund);
        }
        self
    }

    fn user(&self, id: Option<&String>) -> Option<UserView> {
        id.and_then(|id| self.users.get(id)).map(UserView::from)
    }

    pub fn view(&self, p: &Payment) -> PaymentView {
        let target_user = self.user(p.target_user_id.as_ref());
        let (email, phone) = if p.target_user_id.is_some() {
            (None, None)
        } else {
            (p.target_email.clone(), p.target_phone.clone())
        };
        PaymentView {
            id: p.id.clone(),
            status: p.status.as_str(),
            action: p.action.as_str(),
            amount: Money::from_cents(p.amount_cents),
            note: p.note.clone(),
            audience: p.audience.as_str(),
            date_created: format_datetime(p.date_created),
            date_completed: p.date_completed.map(format_datetime),
            actor: self.user(p.actor_id.as_ref()),
            target: TargetView {
                kind: p.target_type.as_str(),
                email,
                phone,
                user: target_user,
            },
            fee: None,
            refund: p
                .refund_payment_id
                .as_ref()
                .and_then(|id| self.refunds.get(id))
                .map(|r| Box::new(self.view(r))),
            medium: p.medium.as_str(),
        }
    }
}
