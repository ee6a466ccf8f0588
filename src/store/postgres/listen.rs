//! A dedicated connection that `LISTEN`s for changes, reconnecting by itself.
//!
//! A notification sent while the connection was down is lost, so every (re)connection
//! also counts as a change: the watcher then compares generations and reloads if it missed
//! one. The watcher's periodic poll backs this up.

use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::CHANNEL;

/// How long to wait before connecting again after the connection was lost.
const RECONNECT: Duration = Duration::from_millis(500);

/// How often an idle listening connection is asked whether it still answers: a server that
/// went silent with the connection open (a hung host, a dropped route) sends no error, and
/// without the question the listener would wait on it for ever.
const CHECK_EVERY: Duration = Duration::from_secs(15);

/// How long connecting, `LISTEN`, and each check may take before the connection is given up.
const ANSWER_WITHIN: Duration = Duration::from_secs(3);

/// Wakes its owner when the store may have changed; stops listening when dropped.
pub struct Listener {
    changes: mpsc::Receiver<()>,
}

impl Listener {
    pub(super) fn start(config: tokio_postgres::Config, tls: MakeRustlsConnect) -> Listener {
        // One pending wake-up is enough: the watcher reloads everything on each.
        let (sender, changes) = mpsc::channel(1);
        tokio::spawn(listen(config, tls, sender));
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

async fn listen(config: tokio_postgres::Config, tls: MakeRustlsConnect, sender: mpsc::Sender<()>) {
    let mut was_up = true;
    while !sender.is_closed() {
        match listen_once(&config, &tls, &sender).await {
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
    tls: &MakeRustlsConnect,
    sender: &mpsc::Sender<()>,
) -> Result<(), String> {
    let connect = tokio::time::timeout(ANSWER_WITHIN, config.connect(tls.clone()));
    let (client, mut connection) = match connect.await {
        Ok(connected) => connected.map_err(|e| e.to_string())?,
        Err(_) => return Err(format!("no connection within {ANSWER_WITHIN:?}")),
    };
    let (message_sender, mut messages) = mpsc::unbounded_channel();
    // The connection only moves when polled: this task pumps it, handing on what it says.
    let pump = tokio::spawn(async move {
        let mut stream = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = stream.next().await {
            // An error ends the connection; over TLS the driver would repeat it on every poll.
            let failed = message.is_err();
            if message_sender.send(message).is_err() || failed {
                return;
            }
        }
    });
    let listen = format!("LISTEN {CHANNEL}");
    let listening = match tokio::time::timeout(ANSWER_WITHIN, client.batch_execute(&listen)).await {
        Ok(listening) => listening.map_err(|e| e.to_string()),
        Err(_) => Err(format!("LISTEN had no answer within {ANSWER_WITHIN:?}")),
    };
    if let Err(error) = listening {
        pump.abort();
        return Err(error);
    }
    let mut check = tokio::time::interval(CHECK_EVERY);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    check.tick().await;
    // Anything may have changed while no connection listened.
    let _ = sender.try_send(());
    let result = loop {
        tokio::select! {
            message = messages.recv() => match message {
                Some(Ok(AsyncMessage::Notification(_))) => {
                    let _ = sender.try_send(());
                }
                Some(Ok(_)) => {}
                Some(Err(error)) => break Err(error.to_string()),
                None => break Ok(()),
            },
            _ = check.tick() => {
                match tokio::time::timeout(ANSWER_WITHIN, client.batch_execute("")).await {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => break Err(error.to_string()),
                    Err(_) => break Err(format!("no answer within {ANSWER_WITHIN:?}")),
                }
            }
            () = sender.closed() => break Ok(()),
        }
    };
    pump.abort();
    drop(client);
    result
}
