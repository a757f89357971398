//! `LeaderElection` and `AsyncLeaderElection`.

use super::*;

fn new_election(
    py: Python<'_>,
    client: &mqstate::Client,
    election: &Bound<'_, PyAny>,
    candidate: &Bound<'_, PyAny>,
    renew_fraction: f64,
) -> PyResult<core::LeaderElection> {
    core::LeaderElection::new(
        client,
        bytes_arg(election, "election")?,
        bytes_arg(candidate, "candidate")?,
    )
    .and_then(|e| e.with_renew_fraction(renew_fraction))
    .or_raise(py)
}

fn election_repr(kind: &str, election: &core::LeaderElection) -> String {
    format!(
        "<mqstate.{kind} election={:?} candidate={:?} leading={}>",
        String::from_utf8_lossy(election.lease().name()),
        String::from_utf8_lossy(election.lease().holder_value()),
        if election.is_leader() {
            "True"
        } else {
            "False"
        }
    )
}

/// An election class: `LeaderElection` (blocking, over `Client`) or `AsyncLeaderElection`
/// (asyncio, over `AsyncClient`), the same methods; `$extra` adds what differs (`events()`
/// and the context-manager methods).
macro_rules! election_class {
    ($name:ident, $py_name:literal, $client:ty, $mode:ty, $doc:literal, { $($extra:tt)* }) => {
        #[doc = $doc]
        #[pyclass(module = "mqstate", name = $py_name, frozen)]
        #[derive(Debug)]
        pub(crate) struct $name {
            inner: core::LeaderElection,
        }

        impl $name {
            /// Resigns if leading (the end of a `with` / `async with` block).
            fn resign_if_leading<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.inner.lease().stop_renewal();
                let election = self.inner.clone();
                <$mode>::run(py, async move {
                    if election.is_leader() {
                        election.resign().await?;
                    }
                    Ok(false)
                })
            }
        }

        #[pymethods]
        impl $name {
            #[new]
            #[pyo3(signature = (client, election, candidate, *, renew_fraction = 0.5))]
            fn new(
                py: Python<'_>,
                client: &Bound<'_, $client>,
                election: &Bound<'_, PyAny>,
                candidate: &Bound<'_, PyAny>,
                renew_fraction: f64,
            ) -> PyResult<Self> {
                Ok($name {
                    inner: new_election(py, &client.get().inner, election, candidate, renew_fraction)?,
                })
            }

            /// True while this candidate believes it leads.
            #[getter]
            fn is_leader(&self) -> bool {
                self.inner.is_leader()
            }

            /// This candidate's fencing token while it leads, else `None`.
            #[getter]
            fn token(&self) -> Option<Hlc> {
                self.inner.lease().current_token().map(Hlc)
            }

            /// Campaigns until elected (the token) or `timeout` passes
            /// (`mqstate.TimeoutError`); the term is then renewed automatically until
            /// `resign()` or a loss.
            fn campaign<'py>(
                &self,
                py: Python<'py>,
                term: &Bound<'py, PyAny>,
                timeout: &Bound<'py, PyAny>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let term = positive_duration_arg(term, "term")?;
                let timeout = positive_duration_arg(timeout, "timeout")?;
                let election = self.inner.clone();
                <$mode>::run(py, async move { election.campaign(term, timeout).await.map(Hlc) })
            }

            /// Tries once: the token if elected, else `None`.
            fn try_campaign<'py>(
                &self,
                py: Python<'py>,
                term: &Bound<'py, PyAny>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let term = positive_duration_arg(term, "term")?;
                let election = self.inner.clone();
                <$mode>::run(py, async move {
                    election.try_campaign(term).await.map(|t| t.map(Hlc))
                })
            }

            /// Steps down (stops renewing, releases the election key); true if this
            /// candidate led.
            fn resign<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                let election = self.inner.clone();
                <$mode>::run(py, async move { election.resign().await })
            }

            /// The current leader, `None` if there is none.
            fn leader<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                let election = self.inner.clone();
                <$mode>::run(py, async move { election.leader().await.map(|l| l.map(BytesOut)) })
            }

            fn __repr__(&self) -> String {
                election_repr($py_name, &self.inner)
            }

            $($extra)*
        }
    };
}

election_class!(
    LeaderElection,
    "LeaderElection",
    Client,
    Blocking,
    "Leader election (blocking): the leader holds the election's lease and renews it \
     automatically; the others wait for it.",
    {
        /// The leadership changes from now on: this candidate's own and other leaders.
        fn events(&self, py: Python<'_>) -> PyResult<LeadershipEvents> {
            let events = wait(py, self.inner.events())?.or_raise(py)?;
            Ok(LeadershipEvents::new(events))
        }

        fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
            slf
        }

        /// Resigns if leading.
        #[pyo3(signature = (*_exc_info))]
        fn __exit__<'py>(
            &self,
            py: Python<'py>,
            _exc_info: &Bound<'py, PyTuple>,
        ) -> PyResult<Bound<'py, PyAny>> {
            self.resign_if_leading(py)
        }
    }
);

election_class!(
    AsyncLeaderElection,
    "AsyncLeaderElection",
    AsyncClient,
    Asyncio,
    "Leader election (asyncio): the methods of `LeaderElection`, as awaitables.",
    {
        /// `events = await election.events()` or `async with election.events() as events:`.
        fn events(&self, py: Python<'_>) -> PyResult<Pending> {
            let election = self.inner.clone();
            let future = aio::spawn(py, async move {
                election.events().await.map(LeadershipEvents::new)
            })?;
            Ok(Pending::new(future))
        }

        fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
            aio::ready(slf.py(), slf.clone())
        }

        /// Resigns if leading.
        #[pyo3(signature = (*_exc_info))]
        fn __aexit__<'py>(
            &self,
            py: Python<'py>,
            _exc_info: &Bound<'py, PyTuple>,
        ) -> PyResult<Bound<'py, PyAny>> {
            self.resign_if_leading(py)
        }
    }
);
