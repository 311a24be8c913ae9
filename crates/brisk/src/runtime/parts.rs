//! [`Parts`]: what the layers above the runtime keep per worker, one value of each type, owned
//! by the worker's context (`WorkerCtx::part`): WebSocket's
//! groups, replay, handover bookkeeping, named endpoints and presence. The runtime cannot name
//! those types (they are above it), so it keeps them by type, as `http::Extensions` keeps a
//! request's: each is made on first use from its `Default` and lives until the worker ends
//! (`WorkerCtx::drop_parts`), which breaks the
//! circles of parts that hold what holds the context (endpoints and their per-worker state).

use std::any::{Any, TypeId};
use std::cell::RefCell;
use std::rc::Rc;

/// One value of each type a worker keeps for the layers above the runtime.
#[derive(Default)]
pub(crate) struct Parts(RefCell<Vec<(TypeId, Rc<dyn Any>)>>);

impl Parts {
    /// This worker's `T`, made now if it has none.
    pub(crate) fn get<T: Default + 'static>(&self) -> Rc<T> {
        let id = TypeId::of::<T>();
        if let Some((_, part)) = self.0.borrow().iter().find(|(t, _)| *t == id) {
            return part.clone().downcast().expect("kept under its own type");
        }
        let part = Rc::new(T::default());
        self.0.borrow_mut().push((id, part.clone()));
        part
    }

    /// Drops every part (those still held elsewhere live on there).
    pub(crate) fn clear(&self) {
        let parts = std::mem::take(&mut *self.0.borrow_mut());
        drop(parts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[derive(Default)]
    struct Counter(Cell<u32>);

    #[derive(Default)]
    struct Other(Cell<u32>);

    #[test]
    fn each_type_has_one_value() {
        let parts = Parts::default();
        parts.get::<Counter>().0.set(3);
        parts.get::<Other>().0.set(9);
        assert_eq!(parts.get::<Counter>().0.get(), 3);
        assert_eq!(parts.get::<Other>().0.get(), 9);
        assert!(Rc::ptr_eq(&parts.get::<Counter>(), &parts.get::<Counter>()));
    }
}
