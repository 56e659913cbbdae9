//! `--worker-rpc-delay-ms`: a TCP relay in front of anvil that holds every
//! byte from the client for a fixed time before passing it on — a remote
//! RPC's round trip, for the full node's workers (the benchmark of how the
//! cluster scales when the work is I/O-bound). Bytes keep their order and
//! are not batched: a request takes the delay once, however it is split.

use std::time::Duration;

use anyhow::Result;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::mpsc,
};

/// Starts the relay to `upstream` (`host:port`); its `http://` URL. It runs
/// until the process ends.
pub(crate) async fn start(upstream: String, delay: Duration) -> Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let upstream = upstream.clone();
            tokio::spawn(async move {
                if let Ok(server) = TcpStream::connect(&upstream).await {
                    relay(client, server, delay).await;
                }
            });
        }
    });
    Ok(url)
}

async fn relay(client: TcpStream, server: TcpStream, delay: Duration) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_in, mut client_out) = client.into_split();
    let (mut server_in, mut server_out) = server.into_split();
    // Client → server: each chunk leaves `delay` after it arrived.
    let (tx, mut rx) = mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let reading = async move {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = client_in.read(&mut buf).await {
            if n == 0 || tx.send((tokio::time::Instant::now() + delay, buf[..n].to_vec())).is_err() {
                break;
            }
        }
    };
    let writing = async move {
        while let Some((at, bytes)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if server_out.write_all(&bytes).await.is_err() {
                break;
            }
        }
        let _ = server_out.shutdown().await;
    };
    let back = async move {
        let _ = tokio::io::copy(&mut server_in, &mut client_out).await;
        let _ = client_out.shutdown().await;
    };
    tokio::join!(reading, writing, back);
}

/// `--fault break-worker`: a relay to `upstream` (`host:port`) that passes
/// bytes both ways until its switch is set, then closes every connection it
/// holds and every one that comes (an RPC gone for that client alone). Its
/// `http://` URL and the switch.
pub(crate) async fn start_breakable(
    upstream: String,
) -> Result<(String, std::sync::Arc<std::sync::atomic::AtomicBool>)> {
    use std::sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    };
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let broken = Arc::new(AtomicBool::new(false));
    let switch = broken.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            if broken.load(Ordering::Relaxed) {
                drop(client);
                continue;
            }
            let (upstream, broken) = (upstream.clone(), broken.clone());
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(&upstream).await else { return };
                let (mut client_in, mut client_out) = client.into_split();
                let (mut server_in, mut server_out) = server.into_split();
                let up = tokio::io::copy(&mut client_in, &mut server_out);
                let down = tokio::io::copy(&mut server_in, &mut client_out);
                let cut = async {
                    while !broken.load(Ordering::Relaxed) {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                };
                // Whichever ends first ends the connection: both halves drop.
                tokio::select! {
                    _ = up => {}
                    _ = down => {}
                    () = cut => {}
                }
            });
        }
    });
    Ok((url, switch))
}
