//! Listing keys: [`Scan`], the pager of `SCAN` (docs/protocol.md, "Listing keys: SCAN"), and
//! [`ScanKeys`], the same listing as a [`Stream`] of keys.
//!
//! A scan asks for one page per request, sending back the continuation token of the page
//! before, until a page comes without one. The token stays inside, as in the official SDK:
//! nothing an application could keep or forge. Creating a scan sends nothing; an empty
//! pattern is refused there, before anything is sent.
//!
//! What a listing guarantees is the server's (docs/protocol.md): every key that exists from
//! the first page to the last is listed; a key created or deleted meanwhile may or may not
//! be. A failed page (a timeout, a lost connection) leaves the scan where it was: calling
//! [`Scan::next_page`] again asks for the same page.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_core::Stream;

use super::Client;
use crate::protocol::errors::Error;
use crate::protocol::resp3::ScanPage;

/// The keys matching a glob pattern, a page at a time (see [`Client::scan`]).
///
/// ```no_run
/// # async fn demo(client: mqstate::Client) -> Result<(), mqstate::Error> {
/// let mut scan = client.scan("line3/*")?;
/// while let Some(keys) = scan.next_page().await? {
///     for key in keys {
///         println!("{}", String::from_utf8_lossy(&key));
///     }
/// }
/// # Ok(()) }
/// ```
pub struct Scan {
    client: Client,
    pattern: Bytes,
    token: Option<Bytes>,
    done: bool,
}

impl fmt::Debug for Scan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scan")
            .field("pattern", &self.pattern)
            .field("pages_left", &!self.done)
            .finish_non_exhaustive()
    }
}

impl Scan {
    pub(super) fn new(client: Client, pattern: &[u8]) -> Result<Scan, Error> {
        super::rpc::check_pattern(pattern)?;
        Ok(Scan {
            client,
            pattern: Bytes::copy_from_slice(pattern),
            token: None,
            done: false,
        })
    }

    /// The pattern being listed.
    pub fn pattern(&self) -> &Bytes {
        &self.pattern
    }

    /// Whether the last page has been received (then [`Scan::next_page`] returns `None`).
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Asks for the next page: its keys (possibly none: the server may return an empty page
    /// that is not the last), or `None` once the last page has been received. Each page is
    /// one request, with the client's timeout ([`Client::with_timeout`]). After an error the
    /// scan is where it was: calling again asks for the same page.
    ///
    /// ```no_run
    /// # async fn demo(client: mqstate::Client) -> Result<(), mqstate::Error> {
    /// let mut scan = client.scan("*")?;
    /// let first = scan.next_page().await?.unwrap_or_default();
    /// println!("{} keys on the first page; more to come: {}", first.len(), !scan.is_done());
    /// # Ok(()) }
    /// ```
    pub async fn next_page(&mut self) -> Result<Option<Vec<Bytes>>, Error> {
        if self.done {
            return Ok(None);
        }
        let page = fetch(
            self.client.clone(),
            self.pattern.clone(),
            self.token.clone(),
        )
        .await?;
        Ok(Some(self.advance(page)))
    }

    /// Takes in a page fetched for this scan's position: moves the position on and returns
    /// the keys. (The blocking facade fetches on its own runtime and hands the page here.)
    pub(crate) fn advance(&mut self, page: ScanPage) -> Vec<Bytes> {
        self.done = page.token.is_none();
        self.token = page.token;
        page.keys
    }

    /// What [`fetch`] needs for the next page, owned (`None` once the scan is done).
    pub(crate) fn next_request(&self) -> Option<(Client, Bytes, Option<Bytes>)> {
        (!self.done).then(|| {
            (
                self.client.clone(),
                self.pattern.clone(),
                self.token.clone(),
            )
        })
    }

    /// The same listing as a [`Stream`] of keys, asking for each page when the keys of the
    /// one before have been read.
    ///
    /// ```no_run
    /// # async fn demo(client: mqstate::Client) -> Result<(), mqstate::Error> {
    /// use std::future::poll_fn;
    /// use std::pin::Pin;
    /// use futures_core::Stream;
    ///
    /// let mut keys = client.scan("sensor/?/temperature")?.into_keys();
    /// while let Some(key) = poll_fn(|cx| Pin::new(&mut keys).poll_next(cx)).await {
    ///     println!("{:?}", key?);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn into_keys(self) -> ScanKeys {
        ScanKeys {
            scan: Some(self),
            buffered: VecDeque::new(),
            pending: None,
        }
    }

    /// Every key of the listing, reading every page (a convenience for listings that fit in
    /// memory).
    ///
    /// ```no_run
    /// # async fn demo(client: mqstate::Client) -> Result<(), mqstate::Error> {
    /// let keys = client.scan("config/*")?.collect_keys().await?;
    /// # Ok(()) }
    /// ```
    pub async fn collect_keys(mut self) -> Result<Vec<Bytes>, Error> {
        let mut keys = Vec::new();
        while let Some(page) = self.next_page().await? {
            keys.extend(page);
        }
        Ok(keys)
    }
}

/// One page request, with everything owned, so that it can run on any runtime.
pub(crate) async fn fetch(
    client: Client,
    pattern: Bytes,
    token: Option<Bytes>,
) -> Result<ScanPage, Error> {
    client
        .inner
        .shared
        .scan(&pattern, token.as_deref(), client.timeout)
        .await
}

type PageFuture = Pin<Box<dyn Future<Output = (Scan, Result<Option<Vec<Bytes>>, Error>)> + Send>>;

/// A scan as a [`Stream`] of keys ([`Scan::into_keys`]). It ends after the last page, or
/// after yielding the first error.
pub struct ScanKeys {
    /// The scan, while no page request is running.
    scan: Option<Scan>,
    buffered: VecDeque<Bytes>,
    /// The page request under way (it owns the scan meanwhile).
    pending: Option<PageFuture>,
}

impl fmt::Debug for ScanKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScanKeys")
            .field("buffered", &self.buffered.len())
            .field("requesting", &self.pending.is_some())
            .finish_non_exhaustive()
    }
}

impl Stream for ScanKeys {
    type Item = Result<Bytes, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if let Some(key) = this.buffered.pop_front() {
                return Poll::Ready(Some(Ok(key)));
            }
            if let Some(pending) = this.pending.as_mut() {
                let (scan, result) = std::task::ready!(pending.as_mut().poll(cx));
                this.pending = None;
                match result {
                    Ok(Some(keys)) => {
                        this.buffered.extend(keys);
                        this.scan = Some(scan);
                    }
                    Ok(None) => return Poll::Ready(None),
                    // The stream ends with its error; the scan is dropped.
                    Err(e) => return Poll::Ready(Some(Err(e))),
                }
                continue;
            }
            match this.scan.take() {
                Some(scan) if !scan.is_done() => {
                    this.pending = Some(Box::pin(async move {
                        let mut scan = scan;
                        let result = scan.next_page().await;
                        (scan, result)
                    }));
                }
                _ => return Poll::Ready(None),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send<T: Send + 'static>() {}

    #[test]
    fn scans_move_across_tasks() {
        send::<Scan>();
        send::<ScanKeys>();
    }
}
