//! A small shop service for the checkout example: catalogue, stock, carts, reservations,
//! payments and receipts.
//!
//! It stands in for the real services an agent's tools would call, and behaves like a good
//! one: every effect honours its idempotency key (a repeated key returns the first result
//! and changes nothing) and is recorded, so the example can *prove* what happened. Its
//! state is saved to a JSON file after every change, so it survives the example being
//! killed and restarted, as a real service would.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Mutex;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A product of the catalogue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Product {
    /// Stock keeping unit.
    pub sku: String,
    /// Display name.
    pub name: String,
    /// Price in cents.
    pub price_cents: u64,
}

/// One applied effect.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Effect {
    /// The operation.
    pub op: String,
    /// Its idempotency key.
    pub key: String,
    /// What it did.
    pub summary: String,
}

/// Everything the shop knows, saved as JSON.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ShopState {
    /// Products by SKU.
    pub catalogue: BTreeMap<String, Product>,
    /// Related products by SKU, for recommendations.
    pub related: BTreeMap<String, Vec<String>>,
    /// Units in stock by SKU.
    pub stock: BTreeMap<String, u32>,
    /// Carts by user.
    pub carts: BTreeMap<String, Vec<String>>,
    /// Held reservations: id -> SKU.
    pub reservations: BTreeMap<String, String>,
    /// Payments: id -> cents.
    pub payments: BTreeMap<String, u64>,
    /// Receipts sent: id -> user.
    pub receipts: BTreeMap<String, String>,
    /// Shipments booked (version 2 of the checkout): id -> payment id.
    #[serde(default)]
    pub shipments: BTreeMap<String, String>,
    /// Every applied effect, in order.
    pub effects: Vec<Effect>,
    /// Requests seen per idempotency key (retries included).
    pub requests: BTreeMap<String, u32>,
    /// First result per idempotency key.
    results: BTreeMap<String, Value>,
    /// The payment gateway times out this many more times.
    pub gateway_timeouts: u32,
    /// Cards the gateway declines.
    pub declined_cards: BTreeSet<String>,
    next_id: u64,
}

/// Errors of the shop.
#[derive(Debug, thiserror::Error)]
pub enum ShopError {
    /// The operation was refused.
    #[error("{0}")]
    Refused(String),
    /// The state file could not be written or read.
    #[error("shop state file {path}: {message}")]
    File {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
}

/// The shop service.
#[derive(Debug)]
pub struct Shop {
    path: Option<PathBuf>,
    state: Mutex<ShopState>,
}

impl Shop {
    /// The demo catalogue, in memory.
    #[must_use]
    pub fn demo() -> Self {
        Self {
            path: None,
            state: Mutex::new(demo_state()),
        }
    }

    /// Open the shop saved at `path`, or create the demo shop there.
    ///
    /// # Errors
    /// When the file exists but cannot be read or parsed.
    pub fn open(path: PathBuf) -> Result<Self, ShopError> {
        let state = if path.exists() {
            let text = std::fs::read_to_string(&path).map_err(|e| file_error(&path, &e))?;
            serde_json::from_str(&text).map_err(|e| file_error(&path, &e))?
        } else {
            demo_state()
        };
        let shop = Self {
            path: Some(path),
            state: Mutex::new(state),
        };
        shop.save(&shop.lock())?;
        Ok(shop)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ShopState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn save(&self, state: &ShopState) -> Result<(), ShopError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let tmp = path.with_extension("tmp");
        let text = serde_json::to_string_pretty(state).map_err(|e| file_error(path, &e))?;
        std::fs::write(&tmp, text).map_err(|e| file_error(path, &e))?;
        std::fs::rename(&tmp, path).map_err(|e| file_error(path, &e))
    }

    /// A copy of the shop's state.
    #[must_use]
    pub fn snapshot(&self) -> ShopState {
        self.lock().clone()
    }

    /// Change the shop (demo setup: gateway timeouts, declined cards).
    ///
    /// # Errors
    /// When the state cannot be saved.
    pub fn configure(&self, f: impl FnOnce(&mut ShopState)) -> Result<(), ShopError> {
        let mut s = self.lock();
        f(&mut s);
        self.save(&s)
    }

    /// Products whose name or SKU contains `query`.
    #[must_use]
    pub fn search(&self, query: &str) -> Vec<Product> {
        let q = query.to_lowercase();
        self.lock()
            .catalogue
            .values()
            .filter(|p| p.sku.contains(&q) || p.name.to_lowercase().contains(&q))
            .cloned()
            .collect()
    }

    /// Products related to the items of `cart`, never one in `cart` or in `exclude`.
    #[must_use]
    pub fn recommend(&self, cart: &[String], exclude: &[String]) -> Vec<Product> {
        let s = self.lock();
        let mut out: Vec<Product> = Vec::new();
        for sku in cart {
            for rel in s.related.get(sku).into_iter().flatten() {
                let skip = cart.contains(rel)
                    || exclude.contains(rel)
                    || out.iter().any(|p| &p.sku == rel);
                if let (false, Some(p)) = (skip, s.catalogue.get(rel)) {
                    out.push(p.clone());
                }
            }
        }
        out
    }

    /// Apply `op` once for `key`: a repeated key returns the first result, changing nothing.
    ///
    /// # Errors
    /// [`ShopError::Refused`] when `apply` refuses (nothing is recorded then, so a retry
    /// with the same key may succeed); file errors.
    pub fn effect(
        &self,
        op: &str,
        key: &str,
        apply: impl FnOnce(&mut ShopState) -> Result<(Value, String), ShopError>,
    ) -> Result<Value, ShopError> {
        let mut s = self.lock();
        *s.requests.entry(key.to_owned()).or_default() += 1;
        if let Some(v) = s.results.get(key) {
            let v = v.clone();
            self.save(&s)?;
            return Ok(v);
        }
        let (value, summary) = apply(&mut s)?;
        s.effects.push(Effect {
            op: op.to_owned(),
            key: key.to_owned(),
            summary,
        });
        s.results.insert(key.to_owned(), value.clone());
        self.save(&s)?;
        Ok(value)
    }

    /// A fresh id with a prefix.
    pub fn next_id(state: &mut ShopState, prefix: &str) -> String {
        state.next_id += 1;
        format!("{prefix}-{}", state.next_id)
    }

    // The shop's API, as the checkout's tools call it: one operation per effect, each
    // applied once per idempotency key.

    /// Put `sku` in `user`'s cart.
    ///
    /// # Errors
    /// Refused for an unknown product; file errors.
    pub fn add_to_cart(&self, key: &str, user: &str, sku: &str) -> Result<Product, ShopError> {
        typed(self.effect("add_to_cart", key, |s| {
            let p = s.catalogue.get(sku).cloned();
            let p = p.ok_or_else(|| ShopError::Refused(format!("no product `{sku}`")))?;
            s.carts
                .entry(user.to_owned())
                .or_default()
                .push(sku.to_owned());
            Ok((json!(p), format!("{user} += {sku}")))
        }))
    }

    /// Take `sku` out of `user`'s cart.
    ///
    /// # Errors
    /// Refused when it is not in the cart; file errors.
    pub fn remove_from_cart(&self, key: &str, user: &str, sku: &str) -> Result<(), ShopError> {
        typed(self.effect("remove_from_cart", key, |s| {
            let cart = s.carts.entry(user.to_owned()).or_default();
            let at = cart.iter().position(|x| x == sku);
            let at = at.ok_or_else(|| ShopError::Refused(format!("`{sku}` is not in the cart")))?;
            cart.remove(at);
            Ok((Value::Null, format!("{user} -= {sku}")))
        }))
    }

    /// Reserve one unit of `sku`; the reservation's id.
    ///
    /// # Errors
    /// Refused when it is out of stock; file errors.
    pub fn reserve(&self, key: &str, sku: &str) -> Result<String, ShopError> {
        typed(self.effect("reserve", key, |s| {
            let stock = s.stock.entry(sku.to_owned()).or_default();
            if *stock == 0 {
                return Err(ShopError::Refused(format!("`{sku}` is out of stock")));
            }
            *stock -= 1;
            let id = Shop::next_id(s, "res");
            s.reservations.insert(id.clone(), sku.to_owned());
            Ok((json!(id), format!("reserved 1 {sku} as {id}")))
        }))
    }

    /// Release reservation `id` (releasing one that is not held changes nothing).
    ///
    /// # Errors
    /// File errors.
    pub fn release(&self, key: &str, id: &str) -> Result<(), ShopError> {
        typed(self.effect("release", key, |s| {
            let Some(sku) = s.reservations.remove(id) else {
                return Ok((Value::Null, format!("{id} was not held")));
            };
            *s.stock.entry(sku.clone()).or_default() += 1;
            Ok((Value::Null, format!("released {id} ({sku})")))
        }))
    }

    /// Whether the payment gateway hangs on this request (the demo's timeouts): the
    /// request is counted as received, and nothing is applied.
    ///
    /// # Errors
    /// File errors.
    pub fn gateway_hangs(&self, key: &str) -> Result<bool, ShopError> {
        let mut hangs = false;
        self.configure(|s| {
            if s.gateway_timeouts > 0 {
                s.gateway_timeouts -= 1;
                hangs = true;
                *s.requests.entry(key.to_owned()).or_default() += 1;
            }
        })?;
        Ok(hangs)
    }

    /// Charge `cents` to `user`'s `card`; the payment's id.
    ///
    /// # Errors
    /// Refused for a declined card; file errors.
    pub fn charge(
        &self,
        key: &str,
        user: &str,
        card: &str,
        cents: u64,
    ) -> Result<String, ShopError> {
        typed(self.effect("charge", key, |s| {
            if s.declined_cards.contains(card) {
                return Err(ShopError::Refused(format!("card {card} declined")));
            }
            let id = Shop::next_id(s, "pay");
            s.payments.insert(id.clone(), cents);
            Ok((json!(id), format!("charged {cents} cents to {user}")))
        }))
    }

    /// Send `user` the receipt of `payment_id`; the receipt's id.
    ///
    /// # Errors
    /// File errors.
    pub fn send_receipt(
        &self,
        key: &str,
        user: &str,
        payment_id: &str,
    ) -> Result<String, ShopError> {
        typed(self.effect("send_receipt", key, |s| {
            let id = Shop::next_id(s, "rcpt");
            s.receipts.insert(id.clone(), user.to_owned());
            Ok((json!(id), format!("receipt {id} for {payment_id}")))
        }))
    }

    /// Book the shipment of `payment_id`'s order to `user`; the shipment's id.
    ///
    /// # Errors
    /// File errors.
    pub fn book_shipment(
        &self,
        key: &str,
        user: &str,
        payment_id: &str,
    ) -> Result<String, ShopError> {
        typed(self.effect("book_shipment", key, |s| {
            let id = Shop::next_id(s, "ship");
            s.shipments.insert(id.clone(), payment_id.to_owned());
            Ok((
                json!(id),
                format!("shipment {id} of {payment_id} to {user}"),
            ))
        }))
    }
}

/// An effect's recorded result, read back as the operation's type.
fn typed<T: serde::de::DeserializeOwned>(v: Result<Value, ShopError>) -> Result<T, ShopError> {
    serde_json::from_value(v?).map_err(|e| ShopError::Refused(format!("recorded result: {e}")))
}

fn file_error(path: &std::path::Path, e: &dyn std::fmt::Display) -> ShopError {
    ShopError::File {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

fn demo_state() -> ShopState {
    let products = [
        ("mug", "Stoneware mug", 1200, &["coaster", "tea"][..]),
        ("coaster", "Cork coaster", 300, &["mug"][..]),
        (
            "tea",
            "Sencha green tea",
            900,
            &["honey", "teapot", "mug"][..],
        ),
        ("honey", "Acacia honey", 700, &["tea"][..]),
        ("teapot", "Cast iron teapot", 4500, &["tea"][..]),
    ];
    let mut s = ShopState::default();
    for (sku, name, price, related) in products {
        s.catalogue.insert(
            sku.to_owned(),
            Product {
                sku: sku.to_owned(),
                name: name.to_owned(),
                price_cents: price,
            },
        );
        s.related.insert(
            sku.to_owned(),
            related.iter().map(|r| (*r).to_owned()).collect(),
        );
        s.stock.insert(sku.to_owned(), 25);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effects_apply_once_per_key() {
        let shop = Shop::demo();
        let add = |s: &mut ShopState| {
            s.stock.insert("mug".into(), 1);
            Ok((Value::from(1), "set".to_owned()))
        };
        shop.effect("set", "k1", add).unwrap();
        shop.effect("set", "k1", |_| panic!("must not apply twice"))
            .unwrap();
        let s = shop.snapshot();
        assert_eq!(s.effects.len(), 1);
        assert_eq!(s.requests["k1"], 2);
    }

    #[test]
    fn recommendations_skip_cart_and_removed_items() {
        let shop = Shop::demo();
        let recs = shop.recommend(&["tea".into()], &["mug".into()]);
        let skus: Vec<_> = recs.iter().map(|p| p.sku.as_str()).collect();
        assert_eq!(skus, ["honey", "teapot"]);
    }

    #[test]
    fn state_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shop.json");
        let shop = Shop::open(path.clone()).unwrap();
        shop.effect("x", "key", |s| {
            s.stock.insert("mug".into(), 3);
            Ok((Value::Null, "x".into()))
        })
        .unwrap();
        drop(shop);
        let again = Shop::open(path).unwrap();
        assert_eq!(again.snapshot().stock["mug"], 3);
        assert_eq!(again.snapshot().effects.len(), 1);
    }
}
