//! The stdio transport: one JSON-RPC message a line on stdin, answers on stdout. Unlike rmcp's
//! own, it bounds a line ([`super::MAX_LINE_BYTES`]) and answers a line that is not JSON, or too
//! long to read, with JSON-RPC's parse error (-32700, `id` null) instead of ignoring it, so a
//! client that sent a broken line learns so instead of waiting for an answer.

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::json;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

use super::MAX_LINE_BYTES;

/// JSON-RPC 2.0's code for input that is not JSON.
pub(crate) const PARSE_ERROR: i64 = -32700;
/// JSON-RPC 2.0's code for JSON that is not a request.
pub(crate) const INVALID_REQUEST: i64 = -32600;

/// Line-delimited JSON-RPC over any reader and writer; [`transport`] over stdin and stdout.
///
/// Its reads survive cancellation: rmcp drops a `receive` future when another event wins the
/// race, so the part of a line read so far lives here, not in the future.
pub(crate) struct Lines<R, W> {
    reader: R,
    writer: Arc<Mutex<W>>,
    limit: usize,
    /// The line read so far.
    partial: Vec<u8>,
    /// The line being read is over the limit: its bytes are dropped up to its end.
    skipping: bool,
    /// Called once, when the input ends (the client closed its side).
    on_end: Option<Box<dyn FnOnce() + Send>>,
}

/// The transport over this process's stdin and stdout.
pub(crate) fn transport() -> Lines<BufReader<tokio::io::Stdin>, tokio::io::Stdout> {
    Lines::new(
        BufReader::new(tokio::io::stdin()),
        tokio::io::stdout(),
        MAX_LINE_BYTES,
    )
}

/// One line read, or why not.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    Text(Vec<u8>),
    /// Over the limit; skipped up to its end.
    TooLong,
    End,
}

impl<R, W> Lines<R, W>
where
    R: AsyncBufRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    pub(crate) fn new(reader: R, writer: W, limit: usize) -> Lines<R, W> {
        Lines {
            reader,
            writer: Arc::new(Mutex::new(writer)),
            limit,
            partial: Vec::new(),
            skipping: false,
            on_end: None,
        }
    }

    /// The same transport, calling `on_end` once when the input ends: the moment the client
    /// showed it left, before the session drains its last replies.
    pub(crate) fn on_end(mut self, on_end: impl FnOnce() + Send + 'static) -> Lines<R, W> {
        self.on_end = Some(Box::new(on_end));
        self
    }

    /// The next line without its end, reading at most `limit` bytes into memory. Cancel-safe:
    /// what it consumed is kept in `self` before the next await.
    async fn next_line(&mut self) -> std::io::Result<Line> {
        loop {
            let available = self.reader.fill_buf().await?;
            if available.is_empty() {
                // A last line without its newline is incomplete: nothing to deliver.
                return Ok(Line::End);
            }
            let (piece, ends) = match available.iter().position(|b| *b == b'\n') {
                Some(at) => (&available[..at], true),
                None => (available, false),
            };
            if !self.skipping && self.partial.len() + piece.len() <= self.limit {
                self.partial.extend_from_slice(piece);
            } else {
                self.skipping = true;
                self.partial.clear();
            }
            let used = piece.len() + usize::from(ends);
            self.reader.consume(used);
            if ends {
                let mut line = std::mem::take(&mut self.partial);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                let too_long = std::mem::replace(&mut self.skipping, false);
                return Ok(if too_long {
                    Line::TooLong
                } else {
                    Line::Text(line)
                });
            }
        }
    }
}

/// Writes a JSON-RPC error that answers no request (its id could not be read). The write is a
/// task of its own, so a `receive` cancelled meanwhile cannot leave half a line on the wire.
async fn answer_error<W: AsyncWrite + Unpin + Send + 'static>(
    writer: &Arc<Mutex<W>>,
    code: i64,
    message: String,
) {
    let error = json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}});
    let writer = Arc::clone(writer);
    let line = error.to_string().into_bytes();
    // A client that stopped reading learns nothing more; the session ends at its next read.
    let _ = tokio::spawn(async move { write_line(&writer, line).await }).await;
}

async fn write_line<W: AsyncWrite + Unpin>(
    writer: &Mutex<W>,
    mut line: Vec<u8>,
) -> std::io::Result<()> {
    line.push(b'\n');
    let mut writer = writer.lock().await;
    writer.write_all(&line).await?;
    writer.flush().await
}

/// What a line holds, for the session.
enum Parsed {
    Message(Box<RxJsonRpcMessage<RoleServer>>),
    /// A notification the session does not know: JSON-RPC answers no notification.
    Ignored,
    Error(i64, String),
}

fn parse(line: &[u8]) -> Parsed {
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    let value: serde_json::Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(err) => return Parsed::Error(PARSE_ERROR, format!("Parse error: {err}")),
    };
    let is_notification = value.get("method").is_some() && value.get("id").is_none();
    match serde_json::from_value(value) {
        Ok(message) => Parsed::Message(Box::new(message)),
        Err(_) if is_notification => Parsed::Ignored,
        Err(err) => Parsed::Error(INVALID_REQUEST, format!("Invalid request: {err}")),
    }
}

impl<R, W> Transport<RoleServer> for Lines<R, W>
where
    R: AsyncBufRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let writer = Arc::clone(&self.writer);
        async move {
            let line = serde_json::to_vec(&item)?;
            write_line(&writer, line).await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let text = match self.next_line().await {
                Ok(Line::Text(text)) => text,
                Ok(Line::TooLong) => {
                    let message = format!("Parse error: the line is over {} bytes", self.limit);
                    answer_error(&self.writer, PARSE_ERROR, message).await;
                    continue;
                }
                Ok(Line::End) | Err(_) => {
                    if let Some(on_end) = self.on_end.take() {
                        on_end();
                    }
                    return None;
                }
            };
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match parse(&text) {
                Parsed::Message(message) => return Some(*message),
                Parsed::Ignored => {}
                Parsed::Error(code, message) => answer_error(&self.writer, code, message).await,
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.writer.lock().await.flush().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn answers(input: &str, limit: usize) -> (Vec<serde_json::Value>, usize) {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let (read, write) = tokio::io::split(server);
        let mut lines = Lines::new(BufReader::new(read), write, limit);
        client.write_all(input.as_bytes()).await.unwrap();
        client.shutdown().await.unwrap();
        let mut received = 0;
        while lines.receive().await.is_some() {
            received += 1;
        }
        drop(lines);
        let mut out = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut client, &mut out)
            .await
            .unwrap();
        let errors = out
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        (errors, received)
    }

    #[tokio::test]
    async fn a_line_that_is_not_json_gets_a_parse_error_and_the_next_line_is_read() {
        let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        let (errors, received) = answers(&format!("{{not json\n{ping}\n"), 1024).await;
        assert_eq!(received, 1);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0]["error"]["code"], PARSE_ERROR);
        assert_eq!(errors[0]["id"], serde_json::Value::Null);
    }

    #[tokio::test]
    async fn a_line_over_the_limit_gets_a_parse_error_and_the_next_line_is_read() {
        let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        let long = format!(r#"{{"pad":"{}"}}"#, "x".repeat(200));
        let (errors, received) = answers(&format!("{long}\n{ping}\r\n"), 100).await;
        assert_eq!(received, 1);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0]["error"]["code"], PARSE_ERROR);
        let message = errors[0]["error"]["message"].as_str().unwrap();
        assert!(message.contains("over 100 bytes"), "{message}");
    }

    #[tokio::test]
    async fn json_that_is_no_request_is_invalid_and_a_notification_is_not_answered() {
        // The notification goes to the session, which answers no notification.
        let input = "[1,2]\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/whatever\"}\n\n";
        let (errors, received) = answers(input, 1024).await;
        assert_eq!(received, 1);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0]["error"]["code"], INVALID_REQUEST);
    }

    #[tokio::test]
    async fn a_receive_cancelled_in_the_middle_of_a_line_loses_none_of_it() {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let (read, write) = tokio::io::split(server);
        let mut lines = Lines::new(BufReader::new(read), write, 1024);
        client.write_all(br#"{"jsonrpc":"2.0","#).await.unwrap();
        let cancelled =
            tokio::time::timeout(std::time::Duration::from_millis(50), lines.receive()).await;
        assert!(cancelled.is_err(), "half a line is no message");
        client
            .write_all(b"\"id\":7,\"method\":\"ping\"}\n")
            .await
            .unwrap();
        let message = lines.receive().await.expect("the whole line");
        assert_eq!(serde_json::to_value(&message).unwrap()["id"], 7);
    }
}
