//! The conversation state of responses the gateway served (`POST /v1/responses` with
//! `store: true`), kept so `previous_response_id` works whichever provider serves a turn.

/// One stored response: its input items and the Response object, both as JSON text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredResponse {
    /// The id the client saw (`resp_…`).
    pub id: String,
    /// Whose it is: the virtual key's id, or `anonymous`. Any other scope sees no such id.
    pub scope: String,
    pub created_ms: i64,
    /// Every input item of the turn, earlier turns' included: a JSON array.
    pub input: String,
    /// The whole Response object: a JSON object.
    pub response: String,
    /// Its output items by id (`msg_…`, `fc_…`), each a JSON object, so a later turn's
    /// `item_reference` can name them.
    pub items: Vec<(String, String)>,
}
