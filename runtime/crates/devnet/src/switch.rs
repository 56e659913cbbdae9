//! The devnet's gossip links. Every gossip connection between two of its
//! peers (the collector is peer 0, validator N is peer N) runs through a
//! TCP relay the devnet owns: one listening port per (dialer, peer) pair,
//! forwarding bytes unchanged to the peer's own port (noise still
//! authenticates the peer end to end). Knowing who dials whom, the devnet can
//! cut one peer off the mesh — its connections closed, new ones refused —
//! and join it again, as a blocked port would, with no firewall and no root.

use std::{net::SocketAddr, sync::Arc};

use anyhow::{Context, Result};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::watch,
};

/// The relays, and each peer's cut switch.
#[derive(Default)]
pub struct Switch {
    /// Per peer (index): true while it is cut off.
    cuts: Vec<Arc<watch::Sender<bool>>>,
    relays: Vec<tokio::task::JoinHandle<()>>,
}

impl Switch {
    fn cut_of(&mut self, peer: usize) -> watch::Receiver<bool> {
        while self.cuts.len() <= peer {
            self.cuts.push(Arc::new(watch::channel(false).0));
        }
        self.cuts[peer].subscribe()
    }

    /// The address `from` dials to reach `to`'s gossip peer, which listens
    /// on `target`: a new relay's port, with `to`'s peer id (`/p2p/…`).
    pub async fn link(&mut self, from: usize, to: usize, target: SocketAddr, peer_id: &str) -> Result<String> {
        let listener = TcpListener::bind("127.0.0.1:0").await.context("a gossip relay's port")?;
        let port = listener.local_addr()?.port();
        let (cut_from, cut_to) = (self.cut_of(from), self.cut_of(to));
        self.relays.push(tokio::spawn(relay(listener, target, cut_from, cut_to)));
        Ok(format!("/ip4/127.0.0.1/tcp/{port}/p2p/{peer_id}"))
    }

    /// Cuts `peer` off (every connection to or from it closed, new ones
    /// refused), or joins it again.
    pub fn set_cut(&mut self, peer: usize, cut: bool) {
        drop(self.cut_of(peer));
        self.cuts[peer].send_replace(cut);
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        for r in &self.relays {
            r.abort();
        }
    }
}

/// Accepts on `listener` and forwards each connection to `target` while
/// neither end is cut off; a cut closes both sides at once.
async fn relay(
    listener: TcpListener,
    target: SocketAddr,
    cut_from: watch::Receiver<bool>,
    cut_to: watch::Receiver<bool>,
) {
    loop {
        let mut inbound = match listener.accept().await {
            Ok((inbound, _)) => inbound,
            // Out of file descriptors, say: tried again shortly.
            Err(_) => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                continue;
            }
        };
        if *cut_from.borrow() || *cut_to.borrow() {
            // Refused: the dialer sees its connection closed at once.
            continue;
        }
        let (mut cut_from, mut cut_to) = (cut_from.clone(), cut_to.clone());
        tokio::spawn(async move {
            let Ok(mut outbound) = TcpStream::connect(target).await else { return };
            let _ = inbound.set_nodelay(true);
            let _ = outbound.set_nodelay(true);
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                _ = cut_from.wait_for(|cut| *cut) => {}
                _ = cut_to.wait_for(|cut| *cut) => {}
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    async fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    fn port(link: &str) -> u16 {
        link.split('/').nth(4).unwrap().parse().unwrap()
    }

    async fn round_trip(s: &mut TcpStream) -> std::io::Result<[u8; 4]> {
        s.write_all(b"ping").await?;
        let mut got = [0u8; 4];
        s.read_exact(&mut got).await?;
        Ok(got)
    }

    #[tokio::test]
    async fn a_cut_closes_a_peers_links_refuses_new_ones_and_a_join_lets_them_through() {
        let target = echo().await;
        let mut switch = Switch::default();
        let link = switch.link(0, 2, target, "12D3KooWpeer").await.unwrap();
        assert!(link.ends_with("/p2p/12D3KooWpeer"), "{link}");
        let other = switch.link(0, 1, target, "12D3KooWother").await.unwrap();
        let addr = |l: &str| SocketAddr::from(([127, 0, 0, 1], port(l)));

        let mut open = TcpStream::connect(addr(&link)).await.unwrap();
        let mut untouched = TcpStream::connect(addr(&other)).await.unwrap();
        assert_eq!(&round_trip(&mut open).await.unwrap(), b"ping");
        assert_eq!(&round_trip(&mut untouched).await.unwrap(), b"ping");

        switch.set_cut(2, true);
        // The open link is closed: a read ends (EOF or reset), within a deadline.
        let mut buf = [0u8; 1];
        let ended = tokio::time::timeout(std::time::Duration::from_secs(5), open.read(&mut buf)).await;
        assert!(matches!(ended, Ok(Ok(0) | Err(_))), "the cut link still carries bytes: {ended:?}");
        // A new connection is refused; the other peer's link still works.
        let mut refused = TcpStream::connect(addr(&link)).await.unwrap();
        assert!(round_trip(&mut refused).await.is_err(), "a cut peer's new connection went through");
        assert_eq!(&round_trip(&mut untouched).await.unwrap(), b"ping");

        switch.set_cut(2, false);
        let mut again = TcpStream::connect(addr(&link)).await.unwrap();
        assert_eq!(&round_trip(&mut again).await.unwrap(), b"ping");
    }
}
