//! `Lease` and `AsyncLease`.

use super::*;

fn new_lease(
    py: Python<'_>,
    client: &mqstate::Client,
    name: &Bound<'_, PyAny>,
    holder: &Bound<'_, PyAny>,
    session_id: Option<&Bound<'_, PyAny>>,
) -> PyResult<core::Lease> {
    let lease = core::Lease::new(
        client,
        bytes_arg(name, "name")?,
        bytes_arg(holder, "holder")?,
    )
    .or_raise(py)?;
    Ok(match session_id {
        Some(session) => lease.with_session_id(bytes_arg(session, "session_id")?),
        None => lease,
    })
}

pub(super) fn lease_repr(kind: &str, lease: &core::Lease) -> String {
    format!(
        "<mqstate.{kind} name={:?} holder={:?} token={}>",
        String::from_utf8_lossy(lease.name()),
        String::from_utf8_lossy(lease.holder_value()),
        lease
            .current_token()
            .map_or_else(|| "None".to_owned(), |t| t.to_string())
    )
}

/// A lease class: `Lease` (blocking, over `Client`) or `AsyncLease` (asyncio, over
/// `AsyncClient`), the same methods; `$extra` adds the context-manager methods of each.
macro_rules! lease_class {
    ($name:ident, $py_name:literal, $client:ty, $mode:ty, $doc:literal, { $($extra:tt)* }) => {
        #[doc = $doc]
        #[pyclass(module = "mqstate", name = $py_name, frozen)]
        #[derive(Debug)]
        pub(crate) struct $name {
            inner: core::Lease,
        }

        impl $name {
            /// Releases the lease if it is held (the end of a `with` / `async with` block).
            fn release_if_held<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.inner.stop_renewal();
                let lease = self.inner.clone();
                <$mode>::run(py, async move {
                    if lease.current_token().is_some() {
                        lease.release().await?;
                    }
                    Ok(false)
                })
            }
        }

        #[pymethods]
        impl $name {
            #[new]
            #[pyo3(signature = (client, name, holder, *, session_id = None))]
            fn new(
                client: &Bound<'_, $client>,
                name: &Bound<'_, PyAny>,
                holder: &Bound<'_, PyAny>,
                session_id: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<Self> {
                Ok($name {
                    inner: new_lease(client.py(), &client.get().inner, name, holder, session_id)?,
                })
            }

            /// The lease's key.
            #[getter]
            fn name<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
                PyBytes::new(py, self.inner.name())
            }

            /// The value this lease writes when it holds the key (`holder`, or
            /// `holder:session_id`).
            #[getter]
            fn holder_value<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
                PyBytes::new(py, self.inner.holder_value())
            }

            /// The fencing token of the last acquire or renewal while the lease is believed
            /// held, else `None`.
            #[getter]
            fn token(&self) -> Option<Hlc> {
                self.inner.current_token().map(Hlc)
            }

            /// Renews the lease in the background every `fraction` × ttl; stops (with a
            /// `"lost"` event) at the first failure or when someone else takes the key.
            #[pyo3(signature = (fraction = 0.5))]
            fn auto_renew(&self, py: Python<'_>, fraction: f64) -> PyResult<()> {
                // The renewal task is spawned on the library's runtime.
                let _context = runtime().enter();
                self.inner.auto_renew(fraction).or_raise(py)
            }

            /// Stops the automatic renewal (the lease stays held until its ttl passes).
            fn stop_renewal(&self) {
                self.inner.stop_renewal();
            }

            /// The lease's events from now on (acquired, renewed, lost, released).
            fn events(&self) -> LeaseEvents {
                LeaseEvents::new(self.inner.events())
            }

            /// Tries once: the fencing token if the lease is held now (newly, or renewed),
            /// `None` if someone else holds it.
            fn acquire<'py>(
                &self,
                py: Python<'py>,
                ttl: &Bound<'py, PyAny>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let ttl = positive_duration_arg(ttl, "ttl")?;
                let lease = self.inner.clone();
                <$mode>::run(py, async move { lease.acquire(ttl).await.map(|t| t.map(Hlc)) })
            }

            /// Acquires the lease, waiting up to `timeout` for the holder to release it or
            /// for its lease to expire (woken by a notification, not by polling); raises
            /// `mqstate.TimeoutError` if it could not be had in time.
            fn acquire_wait<'py>(
                &self,
                py: Python<'py>,
                ttl: &Bound<'py, PyAny>,
                timeout: &Bound<'py, PyAny>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let ttl = positive_duration_arg(ttl, "ttl")?;
                let timeout = positive_duration_arg(timeout, "timeout")?;
                let lease = self.inner.clone();
                <$mode>::run(py, async move { lease.acquire_wait(ttl, timeout).await.map(Hlc) })
            }

            /// Renews with the ttl of the last acquire: the new token, or `None` if the lease
            /// was lost to someone else.
            fn renew<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                let lease = self.inner.clone();
                <$mode>::run(py, async move { lease.renew().await.map(|t| t.map(Hlc)) })
            }

            /// Gives the lease up (stops the renewal); true if this holder held it.
            fn release<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                let lease = self.inner.clone();
                <$mode>::run(py, async move { lease.release().await })
            }

            /// Who holds the lease now (`None` if nobody).
            fn holder<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                let lease = self.inner.clone();
                <$mode>::run(py, async move { lease.holder().await.map(|h| h.map(BytesOut)) })
            }

            fn __repr__(&self) -> String {
                lease_repr($py_name, &self.inner)
            }

            $($extra)*
        }
    };
}

lease_class!(
    Lease,
    "Lease",
    Client,
    Blocking,
    "A lease on a key (blocking): at most one holder at a time, for a time-to-live that the \
     holder renews. The token of each acquire or renewal fences writes (`fencing_token=`).",
    {
        fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
            slf
        }

        /// Releases the lease if it is held.
        #[pyo3(signature = (*_exc_info))]
        fn __exit__<'py>(
            &self,
            py: Python<'py>,
            _exc_info: &Bound<'py, PyTuple>,
        ) -> PyResult<Bound<'py, PyAny>> {
            self.release_if_held(py)
        }
    }
);

lease_class!(
    AsyncLease,
    "AsyncLease",
    AsyncClient,
    Asyncio,
    "A lease on a key (asyncio): the methods of `Lease`, as awaitables.",
    {
        fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
            aio::ready(slf.py(), slf.clone())
        }

        /// Releases the lease if it is held.
        #[pyo3(signature = (*_exc_info))]
        fn __aexit__<'py>(
            &self,
            py: Python<'py>,
            _exc_info: &Bound<'py, PyTuple>,
        ) -> PyResult<Bound<'py, PyAny>> {
            self.release_if_held(py)
        }
    }
);
