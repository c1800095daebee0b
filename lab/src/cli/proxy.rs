//! `lab proxy`: forwards to a ticket service and loses the first N replies.

use clap::Args;
use lab::http::DroppingProxy;
use lab::http::record::Recorder;

use super::flush_stdout;
use super::value;
use lab::BaseUrl;

/// `lab proxy`'s arguments.
#[derive(Args)]
pub struct ProxyArgs {
    /// The service's base URL, e.g. http://127.0.0.1:8080
    #[arg(long, value_name = "URL", value_parser = value::loopback_url)]
    pub upstream: BaseUrl,
    /// The proxy's port; 0 picks a free one. The URL is printed on start.
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// How many replies to lose, counting from the first request
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub drop_first: u32,
    /// Record every request and its fate to FILE, JSON Lines that `lab audit` reads (a new
    /// file, never replacing one; each line written whole when its request's fate is known)
    #[arg(long, value_name = "FILE")]
    pub record: Option<std::path::PathBuf>,
}

/// Starts the proxy, prints its URL and serves until the process is stopped.
///
/// # Errors
/// [`lab::Error::InputInvalid`] for an upstream that is not `http://` on loopback, or a port in
/// use; [`lab::Error::Io`] when the port cannot be bound after all.
pub fn exec(args: &ProxyArgs) -> lab::Result<()> {
    let upstream = DroppingProxy::upstream_address(args.upstream.text())?;
    if args.port != 0 {
        std::net::TcpListener::bind(("127.0.0.1", args.port)).map_err(|err| {
            lab::Error::InputInvalid {
                subject: "--port".to_owned(),
                problem: format!(
                    "{}: cannot listen on 127.0.0.1:{}: {err}",
                    args.port, args.port
                ),
            }
        })?;
    }
    let proxy = match &args.record {
        Some(path) => {
            let recorder = Recorder::create(path, args.upstream.text(), args.drop_first)?;
            DroppingProxy::start_tapped(upstream, args.port, std::sync::Arc::new(recorder))?
        }
        None => DroppingProxy::start(upstream, args.port, args.drop_first)?,
    };
    println!("listening on {}", proxy.url());
    flush_stdout()?;
    proxy.wait();
    Ok(())
}
