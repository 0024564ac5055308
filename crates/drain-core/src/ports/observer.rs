use crate::event::Event;

/// Receives every decision the core makes: metrics, logs and tests subscribe here.
///
/// An implementation is called on the decision path: it should be cheap and never
/// block. Decisions never depend on it.
pub trait Observer: Send + Sync {
    /// One event.
    fn observe(&self, event: &Event<'_>);
}

/// Ignores every event.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopObserver;

impl Observer for NoopObserver {
    fn observe(&self, _event: &Event<'_>) {}
}

impl<O: Observer + ?Sized> Observer for &O {
    fn observe(&self, event: &Event<'_>) {
        (**self).observe(event);
    }
}

impl<O: Observer + ?Sized> Observer for std::sync::Arc<O> {
    fn observe(&self, event: &Event<'_>) {
        (**self).observe(event);
    }
}
