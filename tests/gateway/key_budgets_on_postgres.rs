//! A budget changed on one gateway reaches another on the same PostgreSQL. Run by the
//! `services` binary, which skips it, saying so, where PostgreSQL is missing.

use switchyard::store::postgres::testdb::TestDb;

use super::key_budgets::a_budget_change_on_a_reaches_b;

pub async fn a_budget_changed_on_one_gateway_reaches_another_on_postgresql() {
    let db = TestDb::create().await;
    a_budget_change_on_a_reaches_b(&db.url()).await;
}
