//! What the checkout's tests share: a SQLite store in a temporary directory, and the demo
//! shop whose gateway times out once and declines Bob's card.

use std::sync::Arc;

use durable_agents::store::Store;
use examples::shop::Shop;
use examples::stores;

pub(crate) async fn sqlite(dir: &tempfile::TempDir) -> Arc<dyn Store> {
    stores::open(None, &dir.path().join("runs.sqlite3"))
        .await
        .expect("open sqlite")
        .store
}

pub(crate) fn shop() -> Arc<Shop> {
    let shop = Arc::new(Shop::demo());
    shop.configure(|s| {
        s.gateway_timeouts = 1;
        s.declined_cards.insert("4000-declined".into());
    })
    .unwrap();
    shop
}
