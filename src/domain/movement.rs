//! What moves, as values: the ledger's own accounts, what a movement is, and
//! the money rules of SPEC §5 stated once. Each step of a payment's life
//! (hold, settle, return, charge) moves its amount from one of its parties to
//! another; which steps a payment in a given action and status has taken says
//! what its ledger entries must net to. The ledger decides with these, the
//! stores write the moves they give, and the audit expects what they say.

use super::payment::{PaymentAction, PaymentStatus};

/// Ledger accounts that are not users. Names start with `@` so they can never
/// collide with a user id.
pub mod accounts {
    /// Where deposits come from: its balance is minus everything ever deposited.
    pub const EXTERNAL: &str = "@external";
    /// Money held for pending pays: its balance is the sum of their amounts.
    pub const HELD: &str = "@held";

    /// Whether `account` is one of these rather than a user's (whose balance
    /// a move changes).
    pub fn is_system(account: &str) -> bool {
        account.starts_with('@')
    }
}

/// What a movement of money is, written on each of its ledger entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// Money arriving from outside.
    Deposit,
    /// A pay's amount taken from its actor into `@held`.
    Hold,
    /// A held pay reaching its target.
    Settle,
    /// A charge paid by its target.
    Charge,
    /// A held pay going back to its actor.
    Refund,
    /// A charge that failed (moves nothing).
    Fail,
    /// A charge denied (moves nothing).
    Cancel,
}

impl EntryKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Deposit => "deposit",
            Self::Hold => "hold",
            Self::Settle => "settle",
            Self::Charge => "charge",
            Self::Refund => "refund",
            Self::Fail => "fail",
            Self::Cancel => "cancel",
        }
    }
}

/// `cents` going from one ledger account to another (a user id or an `@` system
/// account). A user account is debited only if its balance covers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub from: String,
    pub to: String,
    pub cents: i64,
}

impl Move {
    /// Its two ledger entries, account and cents: out of `from`, into `to`.
    /// They sum to zero.
    pub fn entries(&self) -> [(&str, i64); 2] {
        [(&self.from, -self.cents), (&self.to, self.cents)]
    }
}

/// One movement of money: `cents` go from `from` to `to`, written as two ledger
/// entries that sum to zero.
#[derive(Debug, Clone)]
pub struct Movement {
    pub id: String,
    pub kind: EntryKind,
    pub from: String,
    pub to: String,
    pub cents: i64,
    pub at: i64,
}

/// Whom a payment's money moves between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Party {
    Actor,
    Target,
    /// Tally's hold (`@held`), where a pay waits to settle.
    Held,
}

/// A step in a payment's life that moves its amount (SPEC §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A pay made: its amount leaves its actor for the hold.
    Hold,
    /// A held pay reaching its target.
    Settle,
    /// A held pay going back to its actor (failed, cancelled or expired).
    Return,
    /// A charge approved: its target pays its actor.
    Charge,
}

impl Step {
    /// The party the amount leaves and the one it reaches.
    pub const fn flow(self) -> (Party, Party) {
        match self {
            Self::Hold => (Party::Actor, Party::Held),
            Self::Settle => (Party::Held, Party::Target),
            Self::Return => (Party::Held, Party::Actor),
            Self::Charge => (Party::Target, Party::Actor),
        }
    }

    /// What its ledger entries are called.
    pub const fn entry_kind(self) -> EntryKind {
        match self {
            Self::Hold => EntryKind::Hold,
            Self::Settle => EntryKind::Settle,
            Self::Return => EntryKind::Refund,
            Self::Charge => EntryKind::Charge,
        }
    }

    /// The steps a payment in this action and status has taken: what its
    /// ledger entries are.
    pub const fn taken(action: PaymentAction, status: PaymentStatus) -> &'static [Self] {
        use PaymentStatus::*;
        match (action, status) {
            (PaymentAction::Pay, Pending) => &[Self::Hold],
            (PaymentAction::Pay, Settled) => &[Self::Hold, Self::Settle],
            (PaymentAction::Pay, Failed | Cancelled | Expired) => &[Self::Hold, Self::Return],
            (PaymentAction::Charge, Settled) => &[Self::Charge],
            // A charge not settled moved nothing.
            (PaymentAction::Charge, Pending | Failed | Cancelled | Expired) => &[],
        }
    }
}

/// What a payment in this action and status has moved in all, net: its amount
/// from the first party to the second, or nothing (a returned pay came back
/// where it started). The sum of [`Step::taken`]'s flows.
pub fn net_flow(action: PaymentAction, status: PaymentStatus) -> Option<(Party, Party)> {
    const PARTIES: [Party; 3] = [Party::Actor, Party::Target, Party::Held];
    let index = |party| PARTIES.iter().position(|p| *p == party).unwrap_or(0);
    let mut net = [0i64; 3];
    for step in Step::taken(action, status) {
        let (from, to) = step.flow();
        net[index(from)] -= 1;
        net[index(to)] += 1;
    }
    let debited = PARTIES.iter().zip(net).find(|(_, n)| *n < 0);
    let credited = PARTIES.iter().zip(net).find(|(_, n)| *n > 0);
    match (debited, credited) {
        (Some((from, _)), Some((to, _))) => Some((*from, *to)),
        _ => None,
    }
}

/// Whether a payment in this action and status came back to its actor, and so
/// must have its refund (no other payment has one).
pub fn is_returned(action: PaymentAction, status: PaymentStatus) -> bool {
    Step::taken(action, status).contains(&Step::Return)
}

/// The accounts of a payment's parties: its actor's and target's (when it has
/// them) and the hold.
#[derive(Debug, Clone, Copy)]
pub struct Parties<'a> {
    pub actor: Option<&'a str>,
    pub target: Option<&'a str>,
}

impl<'a> Parties<'a> {
    pub fn account(&self, party: Party) -> Option<&'a str> {
        match party {
            Party::Actor => self.actor,
            Party::Target => self.target,
            Party::Held => Some(accounts::HELD),
        }
    }

    /// What `step` moves of `cents` between these parties; `None` when one
    /// of its two parties has no account here.
    pub fn step(&self, step: Step, cents: i64) -> Option<Move> {
        let (from, to) = step.flow();
        Some(Move {
            from: self.account(from)?.to_owned(),
            to: self.account(to)?.to_owned(),
            cents,
        })
    }

    /// [`Self::step`] as a movement of its own: with its id, its entries'
    /// kind and its time.
    pub fn movement(&self, step: Step, id: String, cents: i64, at: i64) -> Option<Movement> {
        let Move { from, to, cents } = self.step(step, cents)?;
        Some(Movement {
            id,
            kind: step.entry_kind(),
            from,
            to,
            cents,
            at,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_state_nets_to_what_its_steps_moved() {
        use PaymentAction::*;
        use PaymentStatus::*;
        let cases = [
            (Pay, Pending, Some((Party::Actor, Party::Held))),
            (Pay, Settled, Some((Party::Actor, Party::Target))),
            (Pay, Failed, None),
            (Pay, Cancelled, None),
            (Pay, Expired, None),
            (Charge, Settled, Some((Party::Target, Party::Actor))),
            (Charge, Pending, None),
            (Charge, Failed, None),
            (Charge, Cancelled, None),
            (Charge, Expired, None),
        ];
        for (action, status, net) in cases {
            assert_eq!(net_flow(action, status), net, "{action:?} {status:?}");
            assert_eq!(
                is_returned(action, status),
                action == Pay && matches!(status, Failed | Cancelled | Expired),
                "{action:?} {status:?}"
            );
        }
    }

    #[test]
    fn a_settlement_moves_the_held_amount_to_the_target() {
        let parties = Parties {
            actor: Some("ann"),
            target: Some("bob"),
        };
        let settle = parties.step(Step::Settle, 400);
        assert_eq!(
            settle.as_ref().map(Move::entries),
            Some([(accounts::HELD, -400), ("bob", 400)])
        );
        assert!(Parties {
            actor: Some("ann"),
            target: None
        }
        .step(Step::Settle, 400)
        .is_none());
        assert!(accounts::is_system(accounts::HELD) && !accounts::is_system("bob"));
    }
}
