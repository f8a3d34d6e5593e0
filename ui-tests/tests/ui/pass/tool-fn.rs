// Tools written as functions: shared resources, the call's context, no input, a custom error
// type, hybrid compensations (by `From` and by a function), the agent's tools struct built
// field by field and from a shared state, and states built by their fields' names.
use std::sync::Arc;

use durable_agents::prelude::*;

#[derive(Debug)]
pub struct Db;

#[derive(Clone)]
pub struct App {
    db: Arc<Db>,
    region: String,
}

impl FromShared<App> for Arc<Db> {
    fn from_shared(app: &App) -> Self {
        Arc::clone(&app.db)
    }
}

#[derive(Debug)]
pub enum DbError {
    Gone,
}

impl From<DbError> for ToolError {
    fn from(e: DbError) -> Self {
        ToolError::permanent(format!("{e:?}"))
    }
}

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
pub struct Seat {
    pub id: String,
}

#[derive(Serialize, Deserialize, JsonSchema)]
pub struct Hold {
    pub seat: String,
}

/// Look a seat up.
#[tool_fn(read)]
pub async fn find_seat(Shared(db): Shared<Arc<Db>>, id: String) -> Result<Seat, DbError> {
    let _ = db;
    if id.is_empty() {
        return Err(DbError::Gone);
    }
    Ok(Seat { id })
}

/// The time, without input.
#[tool_fn(read, cache = false, journal_with_commit = true)]
async fn now() -> ToolResult<u64> {
    Ok(0)
}

/// Hold a seat; released by `ReleaseSeat`, whose input is this tool's output.
#[tool_fn(hybrid, compensate = ReleaseSeat, timeout_ms = 500, retries = 2)]
pub async fn hold_seat(
    Shared(db): Shared<Arc<Db>>,
    seat: Seat,
    cx: &ToolContext,
) -> ToolResult<Seat> {
    let _ = (db, cx.idempotency_key());
    Ok(seat)
}

/// Give a seat back.
#[tool_fn(write)]
pub async fn release_seat(Shared(region): Shared<String>, seat: Seat) -> ToolResult<()> {
    let _ = (region, seat);
    Ok(())
}

fn hold_of(seat: &Seat, _: &Hold) -> Seat {
    seat.clone()
}

/// Hold a seat by another shape of output.
#[tool_fn(kind = hybrid, compensate = ReleaseSeat, compensate_input = hold_of)]
pub async fn hold_again(seat: Seat) -> ToolResult<Hold> {
    Ok(Hold { seat: seat.id })
}

impl FromShared<App> for String {
    fn from_shared(app: &App) -> Self {
        app.region.clone()
    }
}

#[derive(Agent, Clone, Serialize, Deserialize)]
#[agent(tools(
    read(FindSeat, Now),
    write(ReleaseSeat),
    hybrid(HoldSeat(compensate = ReleaseSeat), HoldAgain(compensate = ReleaseSeat)),
))]
enum Booking {
    #[agent(initial, tools(FindSeat, Now, HoldSeat, HoldAgain), to(Held, Failed))]
    Start { id: String, tries: u32 },
    #[agent(terminal)]
    Held { seat: String, at: u64 },
    #[agent(terminal, compensate)]
    Failed(String),
}

struct Desk;

impl BookingHandlers for Desk {
    async fn start(
        &self,
        ctx: Ctx<'_, booking::Start>,
        booking::Start { id, tries }: booking::Start,
    ) -> StepResult<booking::Start> {
        if tries > 3 {
            return Ok(ctx.to(booking::Failed("too many tries".to_owned())));
        }
        let seat = ctx.call::<FindSeat>(id).await?;
        let at = ctx.call::<Now>(()).await?;
        let held = ctx.call::<HoldSeat>(seat).await?;
        let _ = ctx.call::<HoldAgain>(held.clone()).await?;
        Ok(ctx.to(booking::Held { seat: held.id, at }))
    }
}

fn main() {
    assert_eq!(<FindSeat as Tool>::NAME, "FindSeat");
    assert_eq!(<FindSeat as Tool>::DESCRIPTION, "Look a seat up.");
    assert_eq!(<HoldSeat as Tool>::policy().retry.max_attempts, 2);
    assert!(!<Now as Tool>::policy().cache);
    assert!(<Now as Tool>::policy().journal_with_commit);
    assert!(!<FindSeat as Tool>::policy().journal_with_commit);
    let app = App {
        db: Arc::new(Db),
        region: "eu".to_owned(),
    };
    let store = Arc::new(MemoryStore::new());
    // Every tool from the application's state...
    let runner = Runner::new(store.clone(), Desk, BookingTools::from_shared(&app));
    assert!(runner.is_ok());
    // ...or field by field.
    let tools = BookingTools {
        find_seat: FindSeat::new(Arc::clone(&app.db)),
        now: Now,
        release_seat: ReleaseSeat::new("eu".to_owned()),
        hold_seat: HoldSeat::new(Arc::new(Db)),
        hold_again: HoldAgain,
    };
    let runner: Result<Runner<Booking, Desk>, _> = Runner::new(store, Desk, tools);
    assert!(runner.is_ok());
}
