//! The team exercise's starting service (the book's "Try it with your team"): a ticket endpoint
//! with no idempotency yet. It is what a team writes first, before it has read the book: every
//! `POST /tickets` inserts a ticket, whatever its `Idempotency-Key`. `lab check --target` finds
//! what that costs; the exercise is to make the check pass.
//!
//! ```sh
//! cargo run -p lab --example team_endpoint -- --port 8080
//! ```
//!
//! - `POST /tickets` with `{"title": ..., "priority": ...}` answers 201 and `{"id": N}`; an empty
//!   or missing title gets 400.
//! - `GET /tickets` lists the caller's own tickets as a JSON array.
//! - The caller comes from `Authorization: Bearer alice-token` or `bob-token`; anything else 401.
//!
//! It listens on 127.0.0.1 only and keeps its tickets in memory until it stops.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use lab::serde_json::{Value, json};
use rusqlite::Connection;

type Db = Arc<Mutex<Connection>>;

/// The caller the bearer token names, if it names one.
fn caller(headers: &HeaderMap) -> Result<&'static str, (StatusCode, Json<Value>)> {
    let token = headers.get("authorization").and_then(|v| v.to_str().ok());
    match token {
        Some("Bearer alice-token") => Ok("alice"),
        Some("Bearer bob-token") => Ok("bob"),
        _ => Err((
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": "unknown token"})),
        )),
    }
}

async fn create(
    State(db): State<Db>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    let caller = match caller(&headers) {
        Ok(caller) => caller,
        Err(refused) => return refused,
    };
    let title = body["title"].as_str().unwrap_or_default();
    if title.is_empty() {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "a title is required"})),
        );
    }
    let priority = body["priority"].as_str().unwrap_or("normal");
    // Step 1 of the exercise starts here: nothing looks at Idempotency-Key yet.
    let db = db.lock().unwrap();
    db.execute(
        "INSERT INTO tickets (caller, title, priority) VALUES (?1, ?2, ?3)",
        (caller, title, priority),
    )
    .unwrap();
    (
        StatusCode::CREATED,
        Json(json!({"id": db.last_insert_rowid()})),
    )
}

async fn list(State(db): State<Db>, headers: HeaderMap) -> (StatusCode, Json<Value>) {
    let caller = match caller(&headers) {
        Ok(caller) => caller,
        Err(refused) => return refused,
    };
    let db = db.lock().unwrap();
    let mut rows = db
        .prepare("SELECT id, title, priority FROM tickets WHERE caller = ?1 ORDER BY id")
        .unwrap();
    let tickets: Vec<Value> = rows
        .query_map([caller], |row| {
            Ok(
                json!({"id": row.get::<_, i64>(0)?, "title": row.get::<_, String>(1)?,
                      "priority": row.get::<_, String>(2)?}),
            )
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    (StatusCode::OK, Json(Value::Array(tickets)))
}

#[tokio::main]
async fn main() {
    let port = match std::env::args().skip(1).collect::<Vec<_>>().as_slice() {
        [] => 8080,
        [flag, port] if flag == "--port" => port.parse().expect("--port takes a number"),
        _ => {
            eprintln!("usage: team_endpoint [--port PORT]");
            std::process::exit(2);
        }
    };
    let db = Connection::open_in_memory().unwrap();
    db.execute_batch(
        "CREATE TABLE tickets (id INTEGER PRIMARY KEY, caller TEXT NOT NULL,
                               title TEXT NOT NULL, priority TEXT NOT NULL);",
    )
    .unwrap();
    let app = Router::new()
        .route("/tickets", post(create).get(list))
        .with_state(Arc::new(Mutex::new(db)));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("the port is free");
    println!("listening on http://{}", listener.local_addr().unwrap());
    axum::serve(listener, app).await.unwrap();
}
