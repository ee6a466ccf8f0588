use super::*;

fn encode(request: Value) -> Result<Value, Rejection> {
    from_openai(
        request.as_object().unwrap(),
        "claude-sonnet-4-5",
        1024,
        false,
    )
    .map(Value::Object)
}

/// OpenAI's documented function-calling round trip, as Anthropic's tool-use guide writes
/// the same conversation.
#[test]
fn golden_tool_round_trip_with_system_prompt() {
    let request = json!({
        "model": "smart",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What's the weather like in Boston today?"},
            {"role": "assistant", "content": null, "tool_calls": [{
                "id": "call_abc123", "type": "function",
                "function": {"name": "get_current_weather", "arguments": "{\"location\":\"Boston, MA\"}"}
            }]},
            {"role": "tool", "tool_call_id": "call_abc123", "content": "72F and sunny"}
        ],
        "tools": [{"type": "function", "function": {
            "name": "get_current_weather",
            "description": "Get the current weather in a given location",
            "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}
        }}],
        "tool_choice": "auto",
        "temperature": 1.5,
        "top_p": 0.9,
        "stop": "END",
        "max_completion_tokens": 200,
        "user": "user-1",
        "frequency_penalty": 0.5,
        "seed": 7
    });
    assert_eq!(
        encode(request).unwrap(),
        json!({
            "model": "claude-sonnet-4-5",
            "system": "You are a helpful assistant.",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "What's the weather like in Boston today?"}]},
                {"role": "assistant", "content": [{
                    "type": "tool_use", "id": "call_abc123", "name": "get_current_weather",
                    "input": {"location": "Boston, MA"}
                }]},
                {"role": "user", "content": [{
                    "type": "tool_result", "tool_use_id": "call_abc123", "content": "72F and sunny"
                }]}
            ],
            "max_tokens": 200,
            "stop_sequences": ["END"],
            "temperature": 1.0,
            "top_p": 0.9,
            "metadata": {"user_id": "user-1"},
            "tools": [{
                "name": "get_current_weather",
                "description": "Get the current weather in a given location",
                "input_schema": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}
            }],
            "tool_choice": {"type": "auto"}
        })
    );
}

#[test]
fn golden_images_base64_and_url() {
    let request = json!({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is in these images?"},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ", "detail": "high"}},
        {"type": "image_url", "image_url": {"url": "https://upload.wikimedia.org/a.jpg"}}
    ]}]});
    assert_eq!(
        encode(request).unwrap()["messages"][0]["content"],
        json!([
            {"type": "text", "text": "What is in these images?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}},
            {"type": "image", "source": {"type": "url", "url": "https://upload.wikimedia.org/a.jpg"}}
        ])
    );
}

#[test]
fn max_tokens_defaults_and_parallel_tool_calls_map() {
    let request = json!({
        "model": "m", "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "parallel_tool_calls": false
    });
    let sent = encode(request).unwrap();
    assert_eq!(sent["max_tokens"], 1024);
    assert_eq!(
        sent["tool_choice"],
        json!({"type": "tool", "name": "f", "disable_parallel_tool_use": true})
    );
    assert_eq!(
        sent["tools"][0]["input_schema"],
        json!({"type": "object", "properties": {}})
    );
}

#[test]
fn untranslatable_fields_are_rejected_by_name() {
    let base = |extra: Value| {
        let mut request = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        for (k, v) in extra.as_object().unwrap() {
            request[k] = v.clone();
        }
        encode(request).unwrap_err().param
    };
    assert_eq!(base(json!({"n": 2})), Some("n".into()));
    assert_eq!(base(json!({"logprobs": true})), Some("logprobs".into()));
    assert_eq!(
        base(json!({"response_format": {"type": "json_object"}})),
        Some("response_format".into())
    );
    assert_eq!(
        base(json!({"tools": [{"type": "web_search"}]})),
        Some("tools[0].type".into())
    );
    assert_eq!(
        base(json!({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]})),
        Some("messages[0].content[0].type".into())
    );
}

#[test]
fn unknown_fields_are_refused_by_name_and_hints_dropped() {
    let base = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let with = |field: &str, value: Value| {
        let mut request = base.clone();
        request[field] = value;
        encode(request)
    };
    assert_eq!(
        with("web_search_options", json!({})).unwrap_err().param,
        Some("web_search_options".into())
    );
    assert_eq!(
        with("x_future", json!(1)).unwrap_err().param,
        Some("x_future".into())
    );
    for hint in ["verbosity", "prompt_cache_key", "seed", "store"] {
        assert!(with(hint, json!("x")).is_ok(), "{hint}");
    }
    let sent = with("safety_identifier", json!("u-1")).unwrap();
    assert_eq!(sent["metadata"], json!({"user_id": "u-1"}));
}

#[test]
fn strict_function_tools_are_strict_anthropic_tools() {
    let request = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f", "strict": true,
                   "parameters": {"type": "object", "properties": {}}}}]});
    assert_eq!(encode(request).unwrap()["tools"][0]["strict"], true);
}

#[test]
fn a_json_schema_response_format_is_anthropics_output_config() {
    let schema = json!({"type": "object", "properties": {"name": {"type": "string"}},
                        "required": ["name"], "additionalProperties": false});
    let request = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
        "response_format": {"type": "json_schema",
                            "json_schema": {"name": "person", "strict": true, "schema": schema}}});
    let sent = encode(request).unwrap();
    assert_eq!(
        sent["output_config"],
        json!({"format": {"type": "json_schema", "schema": schema}})
    );
    let text = json!({"model": "m", "messages": [], "response_format": {"type": "text"}});
    assert!(encode(text).unwrap().get("output_config").is_none());
}
