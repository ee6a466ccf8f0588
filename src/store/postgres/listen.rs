//! A dedicated connection that `LISTEN`s for changes, reconnecting by itself.
//!
//! A notification sent while the connection was down is lost, so every (re)connection
//! also counts as a change: the watcher then compares generations and reloads if it missed
//! one. The watcher's periodic poll backs this up.

use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, NoTls};

use super::CHANNEL;

/// How long to wait before connecting again after the connection was lost.
const RECONNECT: Duration = Duration::from_millis(500);

/// Wakes its owner when the store may have changed; stops listening when dropped.
pub struct Listener {
    changes: mpsc::Receiver<()>,
}

impl Listener {
    pub(super) fn start(config: tokio_postgres::Config) -> Listener {
        // One pending wake-up is enough: the watcher reloads everything on each.
        let (sender, changes) = mpsc::channel(1);
        tokio::spawn(listen(config, sender));
        Listener { changes }
    }

    /// Resolves when another change may have happened.
    pub async fn changed(&mut self) {
        if self.changes.recv().await.is_none() {
            // The listening task is gone (it never is while this lives): wait forever, the
            // watcher's poll keeps the gateway current.
            std::future::pending::<()>().await;
        }
    }
}

async fn listen(config: tokio_postgres::Config, sender: mpsc::Sender<()>) {
    let mut was_up = true;
    while !sender.is_closed() {
        match listen_once(&config, &sender).await {
            Ok(()) => {
                if !was_up {
                    tracing::info!("listening for store changes again");
                }
                was_up = true;
            }
            Err(error) => {
                if was_up {
                    tracing::warn!(%error, "cannot listen for store changes; polling until it can");
                }
                was_up = false;
            }
        }
        tokio::select! {
            () = tokio::time::sleep(RECONNECT) => {}
            () = sender.closed() => return,
        }
    }
}

/// Listens on one connection until it is lost (or the owner is gone).
async fn listen_once(
    config: &tokio_postgres::Config,
    sender: &mpsc::Sender<()>,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = config.connect(NoTls).await?;
    let (message_sender, mut messages) = mpsc::unbounded_channel();
    // The connection only moves when polled: this task pumps it, handing on what it says.
    let pump = tokio::spawn(async move {
        let mut stream = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = stream.next().await {
            if message_sender.send(message).is_err() {
                return;
            }
        }
    });
    let listening = client.batch_execute(&format!("LISTEN {CHANNEL}")).await;
    if let Err(error) = listening {
        pump.abort();
        return Err(error);
    }
    // Anything may have changed while no connection listened.
    let _ = sender.try_send(());
    let result = loop {
        tokio::select! {
            message = messages.recv() => match message {
                Some(Ok(AsyncMessage::Notification(_))) => {
                    let _ = sender.try_send(());
                }
                Some(Ok(_)) => {}
                Some(Err(error)) => break Err(error),
                None => break Ok(()),
            },
            () = sender.closed() => break Ok(()),
        }
    };
    pump.abort();
    drop(client);
    result
}
