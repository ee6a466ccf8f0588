use super::*;

fn translate(request: Value) -> Result<Value, Rejection> {
    to_openai(request.as_object().unwrap()).map(Value::Object)
}

/// Anthropic's documented tool-use conversation (a tool result with an image-free answer),
/// as the OpenAI request that carries the same turns.
#[test]
fn golden_tool_conversation() {
    let request = json!({
        "model": "smart",
        "max_tokens": 1024,
        "system": [{"type": "text", "text": "You are a weather bot.", "cache_control": {"type": "ephemeral"}}],
        "tools": [{
            "name": "get_weather",
            "description": "Get the current weather in a given location",
            "input_schema": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}
        }],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
        "messages": [
            {"role": "user", "content": "What is the weather like in San Francisco?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "…", "signature": "x"},
                {"type": "text", "text": "I'll check."},
                {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather", "input": {"location": "San Francisco, CA"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9", "content": [{"type": "text", "text": "15 degrees"}]},
                {"type": "text", "text": "Thanks!"}
            ]}
        ],
        "stop_sequences": ["###"],
        "temperature": 0.5,
        "top_k": 5,
        "metadata": {"user_id": "u-9"},
        "stream": true
    });
    assert_eq!(
        translate(request).unwrap(),
        json!({
            "model": "smart",
            "messages": [
                {"role": "system", "content": "You are a weather bot."},
                {"role": "user", "content": "What is the weather like in San Francisco?"},
                {"role": "assistant", "content": "I'll check.", "tool_calls": [{
                    "id": "toolu_01A09q90qw90lq917835lq9", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"location\":\"San Francisco, CA\"}"}
                }]},
                {"role": "tool", "tool_call_id": "toolu_01A09q90qw90lq917835lq9", "content": "15 degrees"},
                {"role": "user", "content": "Thanks!"}
            ],
            "max_tokens": 1024,
            "temperature": 0.5,
            "stream": true,
            "stop": ["###"],
            "user": "u-9",
            "tools": [{"type": "function", "function": {
                "name": "get_weather",
                "description": "Get the current weather in a given location",
                "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}
            }}],
            "tool_choice": "required",
            "parallel_tool_calls": false
        })
    );
}

#[test]
fn golden_images() {
    let request = json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}},
        {"type": "image", "source": {"type": "url", "url": "https://upload.wikimedia.org/a.jpg"}},
        {"type": "text", "text": "Describe these."}
    ]}]});
    assert_eq!(
        translate(request).unwrap()["messages"][0]["content"],
        json!([
            {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}},
            {"type": "image_url", "image_url": {"url": "https://upload.wikimedia.org/a.jpg"}},
            {"type": "text", "text": "Describe these."}
        ])
    );
}

#[test]
fn structured_output_becomes_response_format_json_schema() {
    let schema = json!({"type": "object", "properties": {"name": {"type": "string"}},
                        "required": ["name"], "additionalProperties": false});
    for request in [
        json!({"model": "m", "max_tokens": 10, "messages": [],
               "output_config": {"format": {"type": "json_schema", "schema": schema}}}),
        json!({"model": "m", "max_tokens": 10, "messages": [],
               "output_format": {"type": "json_schema", "schema": schema}}),
    ] {
        assert_eq!(
            translate(request).unwrap()["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "output", "schema": schema, "strict": true}})
        );
    }
    let effort = json!({"model": "m", "max_tokens": 10, "messages": [],
                        "output_config": {"effort": "low"}});
    assert_eq!(translate(effort).unwrap()["reasoning_effort"], "low");
    let unknown = json!({"model": "m", "max_tokens": 10, "messages": [],
                         "output_config": {"format": {"type": "grammar"}}});
    assert_eq!(
        translate(unknown).unwrap_err().param,
        Some("output_config.format.type".into())
    );
}

#[test]
fn strict_tools_are_strict_functions() {
    let request = json!({"model": "m", "max_tokens": 10, "messages": [],
        "tools": [{"name": "f", "strict": true, "input_schema": {"type": "object"}}]});
    assert_eq!(
        translate(request).unwrap()["tools"][0]["function"]["strict"],
        true
    );
    let request = json!({"model": "m", "max_tokens": 10, "messages": [],
        "tools": [{"name": "f", "input_schema": {"type": "object"}, "input_examples": [{}]}]});
    assert_eq!(
        translate(request).unwrap_err().param,
        Some("tools.0.input_examples".into())
    );
}

#[test]
fn fields_without_a_counterpart_are_refused_by_name_not_dropped() {
    for field in ["context_management", "mcp_servers", "container", "x_future"] {
        let mut request = json!({"model": "m", "max_tokens": 10, "messages": []});
        request[field] = json!({});
        assert_eq!(
            translate(request).unwrap_err().param,
            Some(field.into()),
            "{field}"
        );
    }
    let server_tool_result = json!({"model": "m", "max_tokens": 10, "messages": [
        {"role": "assistant", "content": [{"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}]}
    ]});
    assert_eq!(
        translate(server_tool_result).unwrap_err().param,
        Some("messages.0.content.type".into())
    );
}

#[test]
fn thinking_is_never_replayed_as_text_to_another_provider() {
    let request = json!({"model": "m", "max_tokens": 10, "thinking": {"type": "enabled", "budget_tokens": 1024},
    "messages": [{"role": "assistant", "content": [
        {"type": "thinking", "thinking": "secret chain of thought", "signature": "sig"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": "Answer."}
    ]}]});
    let sent = translate(request).unwrap();
    assert_eq!(
        sent["messages"],
        json!([{"role": "assistant", "content": "Answer."}])
    );
    assert!(!sent.to_string().contains("secret chain of thought"));
    assert!(sent.get("thinking").is_none());
}

#[test]
fn anthropic_only_features_are_rejected_by_name() {
    let request = json!({"model": "m", "max_tokens": 10, "messages": [],
        "tools": [{"type": "web_search_20250305", "name": "web_search"}]});
    assert_eq!(
        translate(request).unwrap_err().param,
        Some("tools.0.type".into())
    );
    let request = json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "x"}}
    ]}]});
    assert_eq!(
        translate(request).unwrap_err().param,
        Some("messages.0.content.0.type".into())
    );
}
