//! The service with a planted bug that "Check your own tool" checks: the team endpoint
//! (`team_endpoint.rs`) with operation keys added as a first attempt often adds them, and one
//! bug left in on purpose. The key's record and the ticket are written in one transaction, and
//! the record is scoped to its caller, but the record keeps no trace of the payload: a reused key
//! with another payload replays the first ticket, and the changed request is silently dropped.
//!
//! ```sh
//! cargo run -p lab --example planted_bug -- --port 8080
//! ```
//!
//! - `POST /tickets` with `{"title": ..., "priority": ...}` and an `Idempotency-Key` answers 201
//!   and `{"id": N}`; the same key again answers the same. An empty or missing title gets 400.
//! - The key is read as a token: one to 255 letters, digits, `-` or `_`. Any other value,
//!   quoted as the draft writes it or not, gets 400, and so does a request without a key.
//! - `GET /tickets` lists the caller's own tickets as a JSON array.
//! - The caller comes from `Authorization: Bearer alice-token` or `bob-token`; anything else 401.
//!
//! One lock holds the database for each request, so a second request with a key waits for the
//! first and replays it: the service never answers "in progress". It listens on 127.0.0.1 only
//! and keeps its tickets in memory until it stops.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use lab::serde_json::{Value, json};
use rusqlite::{Connection, OptionalExtension};

type Db = Arc<Mutex<Connection>>;
type Answer = (StatusCode, Json<Value>);

fn refused(status: StatusCode, error: &str) -> Answer {
    (status, Json(json!({ "error": error })))
}

/// The caller the bearer token names, if it names one.
fn caller(headers: &HeaderMap) -> Result<&'static str, Answer> {
    let token = headers.get("authorization").and_then(|v| v.to_str().ok());
    match token {
        Some("Bearer alice-token") => Ok("alice"),
        Some("Bearer bob-token") => Ok("bob"),
        _ => Err(refused(StatusCode::UNAUTHORIZED, "unknown token")),
    }
}

/// The operation key, read as a token: the draft's quoted form is refused, not unquoted.
fn key(headers: &HeaderMap) -> Result<String, Answer> {
    let Some(value) = headers.get("idempotency-key") else {
        return Err(refused(
            StatusCode::BAD_REQUEST,
            "an Idempotency-Key is required",
        ));
    };
    let key = value.to_str().unwrap_or_default();
    let token = key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if key.is_empty() || key.len() > 255 || !token {
        return Err(refused(
            StatusCode::BAD_REQUEST,
            "a malformed Idempotency-Key",
        ));
    }
    Ok(key.to_owned())
}

async fn create(State(db): State<Db>, headers: HeaderMap, Json(body): Json<Value>) -> Answer {
    let (caller, key) = match (caller(&headers), key(&headers)) {
        (Ok(caller), Ok(key)) => (caller, key),
        (Err(answer), _) | (_, Err(answer)) => return answer,
    };
    let mut db = db.lock().unwrap();
    // The planted bug: the record is found by caller and key alone. It keeps no payload to
    // compare, so the same key with another title replays the first ticket.
    // ANCHOR: bug
    let replayed: Option<i64> = db
        .query_row(
            "SELECT ticket_id FROM records WHERE caller = ?1 AND key = ?2",
            (caller, &key),
            |row| row.get(0),
        )
        .optional()
        .unwrap();
    if let Some(id) = replayed {
        return (StatusCode::CREATED, Json(json!({ "id": id })));
    }
    // ANCHOR_END: bug
    let title = body["title"].as_str().unwrap_or_default();
    if title.is_empty() {
        return refused(StatusCode::BAD_REQUEST, "a title is required");
    }
    let priority = body["priority"].as_str().unwrap_or("normal");
    // The ticket and its record in one transaction: both are written, or neither.
    let tx = db.transaction().unwrap();
    tx.execute(
        "INSERT INTO tickets (caller, title, priority) VALUES (?1, ?2, ?3)",
        (caller, title, priority),
    )
    .unwrap();
    let id = tx.last_insert_rowid();
    tx.execute(
        "INSERT INTO records (caller, key, ticket_id) VALUES (?1, ?2, ?3)",
        (caller, &key, id),
    )
    .unwrap();
    tx.commit().unwrap();
    (StatusCode::CREATED, Json(json!({ "id": id })))
}

async fn list(State(db): State<Db>, headers: HeaderMap) -> Answer {
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
            eprintln!("usage: planted_bug [--port PORT]");
            std::process::exit(2);
        }
    };
    let db = Connection::open_in_memory().unwrap();
    db.execute_batch(
        "CREATE TABLE tickets (id INTEGER PRIMARY KEY, caller TEXT NOT NULL,
                               title TEXT NOT NULL, priority TEXT NOT NULL);
         CREATE TABLE records (caller TEXT NOT NULL, key TEXT NOT NULL,
                               ticket_id INTEGER NOT NULL REFERENCES tickets (id),
                               PRIMARY KEY (caller, key));",
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
