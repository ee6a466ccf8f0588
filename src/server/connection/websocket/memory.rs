//! A socket's memory of its conversations: each lane's latest turn, whole (every input item
//! from the first turn on, then its output), so `previous_response_id` continues it even
//! with `store: false`, as OpenAI's WebSocket mode does. Bounded: a few lanes, and no turn
//! larger than a cap is kept (a later turn then continues through the store, or not at all).

use std::sync::{Arc, Mutex, MutexGuard};

use foldhash::HashMap;
use serde_json::Value;

/// The most lanes (`stream_id`s) one socket keeps a turn for, and may run at once.
pub const MAX_LANES: usize = 16;
/// The largest turn kept, as JSON; with [`MAX_LANES`], what a socket may hold.
const MAX_TURN_BYTES: usize = 8 * 1024 * 1024;

/// One lane's latest turn.
struct Kept {
    response_id: String,
    items: Arc<Vec<Value>>,
}

#[derive(Clone, Default)]
pub struct Memory {
    lanes: Arc<Mutex<HashMap<String, Kept>>>,
}

impl Memory {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Kept>> {
        // A poisoned lock only means a panic between two map operations.
        self.lanes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The whole conversation up to and including `response_id`, if a lane's latest turn is
    /// it: from any lane, so a new lane can fork it.
    pub fn conversation(&self, response_id: &str) -> Option<Arc<Vec<Value>>> {
        self.lock()
            .values()
            .find(|kept| kept.response_id == response_id)
            .map(|kept| kept.items.clone())
    }

    /// Keeps `lane`'s latest turn, in place of the one before it.
    pub fn keep(&self, lane: &str, response_id: &str, items: Vec<Value>) {
        let size: usize = items.iter().map(|item| item.to_string().len()).sum();
        let mut lanes = self.lock();
        if size > MAX_TURN_BYTES || (lanes.len() >= MAX_LANES && !lanes.contains_key(lane)) {
            lanes.remove(lane);
            return;
        }
        lanes.insert(
            lane.to_owned(),
            Kept {
                response_id: response_id.to_owned(),
                items: Arc::new(items),
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_turn_is_found_from_any_lane_and_replaced_by_its_lanes_next() {
        let memory = Memory::default();
        memory.keep(
            "a",
            "resp_1",
            vec![json!({"role": "user", "content": "hi"})],
        );
        assert_eq!(memory.conversation("resp_1").map(|c| c.len()), Some(1));
        memory.keep("a", "resp_2", vec![json!(1), json!(2)]);
        assert!(memory.conversation("resp_1").is_none());
        assert_eq!(memory.conversation("resp_2").map(|c| c.len()), Some(2));
    }

    #[test]
    fn lanes_and_turns_are_bounded() {
        let memory = Memory::default();
        for lane in 0..MAX_LANES + 4 {
            memory.keep(
                &lane.to_string(),
                &format!("resp_{lane}"),
                vec![json!(lane)],
            );
        }
        assert!(
            memory
                .conversation(&format!("resp_{}", MAX_LANES - 1))
                .is_some()
        );
        assert!(memory.conversation(&format!("resp_{MAX_LANES}")).is_none());
        let huge = vec![json!("x".repeat(MAX_TURN_BYTES + 1))];
        memory.keep("0", "resp_huge", huge);
        assert!(memory.conversation("resp_huge").is_none());
        assert!(
            memory.conversation("resp_0").is_none(),
            "the lane's older turn is gone too"
        );
    }
}
