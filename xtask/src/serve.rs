//! A static file server on loopback for the browser checks: the book, and the report pages.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use anyhow::{Context, Result};

/// A static file server on 127.0.0.1 with an ephemeral port, for one folder. Stops when dropped.
pub(crate) struct Server {
    pub(crate) address: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Serves `folder` on 127.0.0.1, on a port the system picks.
    pub(crate) fn start(folder: &Path) -> Result<Server> {
        let listener = TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1")?;
        let address = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let folder = folder.to_owned();
        let stopping = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let folder = folder.clone();
                std::thread::spawn(move || {
                    // A reader that hangs up mid-request is no concern of the check.
                    let _ = serve(stream, &folder);
                });
            }
        });
        Ok(Server {
            address,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.address);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Answers one request with a file from `folder`, or 404.
fn serve(stream: TcpStream, folder: &Path) -> Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    // Read the headers to their end, so the client is not cut off mid-send.
    let mut header = String::new();
    while reader.read_line(&mut header)? > 2 {
        header.clear();
    }
    let path = request_line.split_whitespace().nth(1).unwrap_or("/");
    let (status, kind, body) = match file_for(folder, path) {
        Some(file) => match std::fs::read(&file) {
            Ok(body) => ("200 OK", content_type(&file), body),
            Err(_) => ("404 Not Found", "text/plain", b"not found".to_vec()),
        },
        None => ("404 Not Found", "text/plain", b"not found".to_vec()),
    };
    let mut stream = stream;
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    stream.write_all(&body)?;
    Ok(())
}

/// The file a request path names inside `folder`, or `None` for a path that leaves it or does
/// not exist.
fn file_for(folder: &Path, path: &str) -> Option<PathBuf> {
    let path = path.split(['?', '#']).next().unwrap_or("");
    let decoded = percent_decode(path)?;
    let mut file = folder.to_owned();
    for part in decoded.split('/').filter(|p| !p.is_empty()) {
        if part == ".." || part == "." || part.contains('\\') {
            return None;
        }
        file.push(part);
    }
    if file.is_dir() {
        file.push("index.html");
    }
    file.is_file().then_some(file)
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn content_type(file: &Path) -> &'static str {
    match file.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("json") => "application/json",
        Some("woff2") => "font/woff2",
        Some("woff") => "font/woff",
        Some("ttf") => "font/ttf",
        Some("txt") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn get(address: SocketAddr, path: &str) -> String {
        let mut stream = TcpStream::connect(address).unwrap();
        write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer
    }

    #[test]
    fn the_server_serves_files_and_refuses_paths_outside_its_folder() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path();
        std::fs::create_dir_all(dir.join("css")).unwrap();
        std::fs::write(dir.join("index.html"), "<h1>home</h1>").unwrap();
        std::fs::write(dir.join("css").join("a b.css"), "p{}").unwrap();
        let server = Server::start(dir).unwrap();
        let home = get(server.address, "/");
        assert!(home.starts_with("HTTP/1.1 200 OK"), "{home}");
        assert!(home.ends_with("<h1>home</h1>"));
        let css = get(server.address, "/css/a%20b.css?v=1");
        assert!(css.contains("Content-Type: text/css"), "{css}");
        assert!(get(server.address, "/missing.html").starts_with("HTTP/1.1 404"));
        assert!(get(server.address, "/../Cargo.toml").starts_with("HTTP/1.1 404"));
        drop(server);
    }
}
