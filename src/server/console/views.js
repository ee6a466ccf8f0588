// The console's views. Each renders into its container from admin API answers and
// re-renders itself after a change, so what it shows is what the gateway holds.

import {
  call, el, clear, when, usd, orDash, notice, field, values, numberOrNull, listOrNull, table,
} from "./api.js";

// A two-step button: the first click arms it, the second does it.
function confirmButton(label, testid, action) {
  const button = el("button", { type: "button", class: "danger", "data-testid": testid }, label);
  button.addEventListener("click", async () => {
    if (button.dataset.armed !== "true") {
      button.dataset.armed = "true";
      button.textContent = "Confirm " + label.toLowerCase();
      return;
    }
    button.disabled = true;
    await action();
  });
  return button;
}

// Runs a change; re-renders the view, then says what happened (or what went wrong).
async function change(container, render, work, done) {
  try {
    const answer = await work();
    await render(container);
    if (done) notice(container, "ok", done(answer));
    return answer;
  } catch (error) {
    notice(container, "error", error.message);
    return null;
  }
}

// ---- Overview: the scorecard, which the metrics token may read too. ----

async function overview(container) {
  const card = await call("GET", "/v1/scorecard");
  const windows = ["5m", "1h", "24h"];
  const row = (label, pick) => el("tr", {}, el("th", { scope: "row" }, label), windows.map((w) => el("td", {}, pick(card.overall[w]))));
  const pct = (v) => (v === null || v === undefined ? "—" : (v * 100).toFixed(2) + "%");
  container.append(
    table("overview-table", ["", ...windows], [
      row("Requests", (s) => s.requests),
      row("Availability", (s) => pct(s.availability)),
      row("Fallback rate", (s) => pct(s.fallback_rate)),
      row("Errors", (s) => s.error),
      row("Rejected", (s) => s.rejected),
      row("p95 latency (ms)", (s) => (s.latency_ms.p95 === null ? "—" : s.latency_ms.p95.toFixed(1))),
      row("Cost", (s) => usd(s.cost_usd)),
    ]),
    el("h3", {}, "Alerts"),
    card.alerts.length
      ? el("ul", { "data-testid": "alerts" }, card.alerts.map((a) => el("li", { "data-alert": a.alert }, a.scope + " " + a.name + ": " + a.alert.replaceAll("_", " ") + " (threshold " + a.threshold + ")")))
      : el("p", { "data-testid": "alerts" }, "None."),
    el("p", {}, el("a", { href: "/dashboard", target: "_blank", rel: "noopener noreferrer" }, "Open the charts (/dashboard)")),
  );
}

// ---- Virtual keys ----

const KEY_LIMITS = [
  ["Requests a minute", "requests_per_minute"],
  ["Tokens a minute", "tokens_per_minute"],
  ["At once", "max_concurrent"],
  ["Budget a day ($)", "budget_per_day"],
  ["Budget a month ($)", "budget_per_month"],
];

async function virtualKeys(container) {
  clear(container);
  const { virtual_keys: keys } = await call("GET", "/admin/virtual-keys");
  const search = el("input", { type: "search", placeholder: "Search id, user, role, model", "data-testid": "vkey-search", "aria-label": "Search keys" });
  const body = el("tbody", {});
  const editor = el("div", { "data-testid": "vkey-editor" });
  const draw = () => {
    const needle = search.value.trim().toLowerCase();
    clear(body);
    for (const key of keys) {
      const text = [key.id, key.user, key.role, ...(key.models || [])].join(" ").toLowerCase();
      if (needle && !text.includes(needle)) continue;
      const live = key.state === "active";
      body.append(
        el("tr", { "data-key-id": key.id, "data-state": key.state },
          el("td", {}, el("code", {}, key.id)),
          el("td", {}, key.key),
          el("td", {}, key.user),
          el("td", {}, key.role),
          el("td", {}, key.models ? key.models.join(", ") : "all"),
          el("td", {}, KEY_LIMITS.slice(0, 3).map(([, n]) => orDash(key[n])).join(" / ")),
          el("td", {}, orDash(usd(key.budget_per_day)) + " / " + orDash(usd(key.budget_per_month))),
          el("td", {}, key.expires_ms ? when(key.expires_ms) : "never"),
          el("td", { class: "state-" + key.state }, key.state),
          el("td", {},
            live && el("button", { type: "button", "data-testid": "vkey-edit", onclick: () => edit(key) }, "Edit"),
            live && confirmButton("Revoke", "vkey-revoke", () =>
              change(container, virtualKeys, () => call("DELETE", "/admin/virtual-keys/" + encodeURIComponent(key.id)), () => "Revoked " + key.id + ".")),
          ),
        ),
      );
    }
  };
  const edit = (key) => {
    clear(editor);
    const form = el("form", { class: "card", "data-testid": "vkey-edit-form" },
      el("h3", {}, "Edit " + key.id + " (" + key.user + ")"),
      field("Role", "role", { value: key.role }),
      field("Models (comma-separated; empty for all)", "models", { value: (key.models || []).join(", ") }),
      KEY_LIMITS.map(([label, name]) => field(label + " (empty: the role's)", name, { value: key[name] ?? "", inputmode: "decimal" })),
      field("Expires in (such as 30d; empty: unchanged)", "expires_in"),
      el("label", { class: "inline" }, el("input", { type: "checkbox", name: "never", "data-testid": "input-never" }), "Never expires"),
      el("button", { type: "submit", "data-testid": "vkey-save" }, "Save"),
    );
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const v = values(form);
      const patch = { role: v.role, models: listOrNull(v.models) };
      for (const [, name] of KEY_LIMITS) patch[name] = numberOrNull(v[name]);
      if (v.never) patch.expires_ms = null;
      else if (v.expires_in) patch.expires_in = v.expires_in;
      change(container, virtualKeys, () => call("PATCH", "/admin/virtual-keys/" + encodeURIComponent(key.id), patch), () => "Saved " + key.id + ".");
    });
    editor.append(form);
  };
  search.addEventListener("input", draw);
  draw();
  container.append(
    createKeyForm(container),
    el("div", { class: "toolbar" }, search),
    table("vkey-table", ["Id", "Key", "User", "Role", "Models", "RPM / TPM / at once", "Budget day / month", "Expires", "State", ""], body),
    editor,
  );
}

function createKeyForm(container) {
  const form = el("form", { class: "card", "data-testid": "vkey-create-form" },
    el("h3", {}, "New key"),
    field("User", "user", { required: true }),
    field("Role", "role", { required: true }),
    field("Models (comma-separated; empty for all)", "models"),
    KEY_LIMITS.map(([label, name]) => field(label, name, { inputmode: "decimal" })),
    field("Expires in (such as 30d)", "expires_in"),
    el("button", { type: "submit", "data-testid": "vkey-create" }, "Create"),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const v = values(form);
    const body = { user: v.user, role: v.role };
    if (v.models) body.models = listOrNull(v.models);
    for (const [, name] of KEY_LIMITS) if (v[name] !== "") body[name] = Number(v[name]);
    if (v.expires_in) body.expires_in = v.expires_in;
    const created = await change(container, virtualKeys, () => call("POST", "/admin/virtual-keys", body));
    if (created) container.prepend(secretOnce(created));
  });
  return form;
}

// The new key, shown this once: it is not kept anywhere, and leaves the page when dismissed.
function secretOnce(created) {
  const box = el("div", { class: "notice ok secret", role: "status", "data-testid": "vkey-secret-box" },
    el("p", {}, "Key " + created.id + " for " + created.user + ". Copy it now: it is shown only this once."),
    el("code", { "data-testid": "vkey-secret" }, created.secret),
  );
  const copy = el("button", { type: "button" }, "Copy");
  copy.addEventListener("click", () => navigator.clipboard && navigator.clipboard.writeText(created.secret));
  const dismiss = el("button", { type: "button", "data-testid": "vkey-secret-dismiss" }, "Done");
  dismiss.addEventListener("click", () => box.remove());
  box.append(copy, dismiss);
  return box;
}

// ---- Provider keys ----

async function providerKeys(container) {
  clear(container);
  const [{ keys }, { breakers }] = await Promise.all([call("GET", "/admin/keys"), call("GET", "/admin/breakers")]);
  // A key is benched when any of its breakers is (a 401 or 403 from the provider).
  const benched = {};
  for (const b of breakers) {
    if (b.key && b.benched_for_ms) {
      const id = b.provider + "/" + b.key;
      benched[id] = Math.max(benched[id] || 0, b.benched_for_ms);
    }
  }
  const rows = keys.map((key) => {
    const bench = benched[key.provider + "/" + key.id];
    const path = "/admin/keys/" + encodeURIComponent(key.provider);
    return el("tr", { "data-provider": key.provider, "data-key-id": key.id, "data-version": key.version },
      el("td", {}, key.provider),
      el("td", {}, el("code", {}, key.id)),
      el("td", { "data-testid": "pkey-version" }, key.version),
      el("td", {}, key.weight),
      el("td", {}, key.history),
      el("td", {}, when(key.created_ms)),
      el("td", {}, when(key.rotated_ms)),
      el("td", {}, key.expires_ms ? when(key.expires_ms) : "never"),
      el("td", { class: "state-" + key.state }, key.state),
      el("td", { "data-testid": "pkey-benched" }, bench ? "benched " + Math.ceil(bench / 1000) + " s" : "no"),
      el("td", {},
        el("button", { type: "button", "data-testid": "pkey-rotate", onclick: () => rotate(key) }, "Rotate"),
        key.history > 0 && el("button", {
          type: "button", "data-testid": "pkey-rollback",
          onclick: () => change(container, providerKeys, () => call("POST", path + "/rollback", { id: key.id }), (a) => "Rolled " + key.provider + "/" + key.id + " back to version " + a.version + "."),
        }, "Roll back"),
        confirmButton("Delete", "pkey-delete", () =>
          change(container, providerKeys, () => call("DELETE", path + "/" + encodeURIComponent(key.id)), () => "Deleted " + key.provider + "/" + key.id + ".")),
      ),
    );
  });
  const editor = el("div", {});
  const rotate = (key) => {
    clear(editor);
    editor.append(keyForm(container, "Rotate " + key.provider + "/" + key.id, { provider: key.provider, id: key.id }));
  };
  container.append(
    keyForm(container, "Add a key", {}),
    table("pkey-table", ["Provider", "Id", "Version", "Weight", "Older versions", "Created", "Rotated", "Expires", "State", "Benched", ""], rows),
    editor,
  );
}

// Adds a key, or rotates one (`fixed` names it). The secret goes to the gateway and is
// cleared from the form; the gateway never sends it back.
function keyForm(container, title, fixed) {
  const form = el("form", { class: "card", "data-testid": fixed.id ? "pkey-rotate-form" : "pkey-add-form", autocomplete: "off" },
    el("h3", {}, title),
    !fixed.provider && field("Provider", "provider", { required: true }),
    !fixed.id && field("Key id", "id", { placeholder: "default" }),
    field("Secret", "secret", { type: "password", required: true, autocomplete: "off" }),
    field("Weight", "weight", { inputmode: "numeric" }),
    field("Expires in (such as 90d)", "expires_in"),
    el("button", { type: "submit", "data-testid": fixed.id ? "pkey-rotate-save" : "pkey-add" }, fixed.id ? "Rotate" : "Add"),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const v = Object.assign(values(form), fixed);
    form.secret.value = "";
    const body = { secret: v.secret };
    if (v.id) body.id = v.id;
    if (v.weight) body.weight = Number(v.weight);
    if (v.expires_in) body.expires_in = v.expires_in;
    change(container, providerKeys, () => call("PUT", "/admin/keys/" + encodeURIComponent(v.provider), body),
      (a) => "Stored " + a.provider + "/" + a.id + " as version " + a.version + ".");
  });
  return form;
}

// ---- Breakers and the retry and hedge budgets ----

async function breakers(container) {
  clear(container);
  const [{ breakers: list }, budgets] = await Promise.all([call("GET", "/admin/breakers"), call("GET", "/admin/budgets")]);
  const reset = (query, label) =>
    change(container, breakers, () => call("POST", "/admin/breakers/reset" + query), (a) => "Reset " + a.reset + " breaker(s)" + label + ".");
  const rows = list.map((b) =>
    el("tr", { "data-provider": b.provider, "data-model": b.model, "data-state": b.state },
      el("td", {}, b.provider), el("td", {}, b.model), el("td", {}, orDash(b.key)),
      el("td", { class: "state-" + b.state, "data-testid": "breaker-state" }, b.state),
      el("td", {}, b.consecutive_failures),
      el("td", {}, b.window.failures + " / " + b.window.requests),
      el("td", {}, b.times_opened),
      el("td", {}, b.next_probe_in_ms === null ? "—" : Math.ceil(b.next_probe_in_ms / 1000) + " s"),
      el("td", {}, b.benched_for_ms ? Math.ceil(b.benched_for_ms / 1000) + " s" : "—"),
      el("td", {}, b.latency_ewma_ms === null ? "—" : b.latency_ewma_ms.toFixed(1)),
      el("td", {}, el("button", {
        type: "button", "data-testid": "breaker-reset",
        onclick: () => reset("?provider=" + encodeURIComponent(b.provider) + "&model=" + encodeURIComponent(b.model), " on " + b.provider + "/" + b.model),
      }, "Reset")),
    ));
  const retry = budgets.retry;
  const hedge = budgets.hedge;
  container.append(
    el("div", { class: "toolbar" }, el("button", { type: "button", "data-testid": "breaker-reset-all", onclick: () => reset("", "") }, "Reset all")),
    table("breaker-table", ["Provider", "Model", "Key", "State", "Failures in a row", "Window failures / requests", "Times opened", "Next probe", "Benched", "Latency (ms)", ""], rows),
    el("h3", {}, "Retry budget"),
    el("p", { "data-testid": "retry-budget" }, retry.off
      ? "Off: every retry the chain asks for is made."
      : "Retries may add " + retry.budget_percent + "% to each deployment's requests, and at least " + retry.min_retries_per_second + " a second."),
    table("retry-table", ["Provider", "Model", "Requests", "Retries", "Limit"],
      retry.deployments.map((d) => el("tr", {}, el("td", {}, d.provider), el("td", {}, d.model), el("td", {}, d.requests), el("td", {}, d.retries), el("td", {}, orDash(d.limit))))),
    el("h3", {}, "Hedge budget"),
    el("p", { "data-testid": "hedge-budget" }, "At most " + hedge.budget_percent + "% of a route's requests in the last 10 s may be hedged."),
    table("hedge-table", ["Route", "Hedge after", "At most"],
      hedge.routes.map((r) => el("tr", {}, el("td", {}, r.route), el("td", {}, r.after), el("td", {}, r.max)))),
  );
}

// ---- The request log ----

const FILTERS = [["Key id", "key"], ["User", "user"], ["Route", "route"], ["Status (429, 5xx)", "status"]];
const OUTCOMES = ["", "success", "fallback", "degraded", "error", "rejected"];

function logQuery(form, format) {
  const v = values(form);
  const query = new URLSearchParams();
  for (const [, name] of FILTERS) if (v[name]) query.set(name, v[name]);
  if (v.outcome) query.set("outcome", v.outcome);
  // datetime-local is the operator's local time; the API takes epoch milliseconds.
  for (const name of ["since", "until"]) if (v[name]) query.set(name, String(new Date(v[name]).getTime()));
  if (v.limit) query.set("limit", v.limit);
  if (format) query.set("format", format);
  return "/admin/requests?" + query.toString();
}

async function requests(container) {
  clear(container);
  const results = el("div", { "data-testid": "log-results" });
  const detail = el("div", { "data-testid": "log-detail" });
  const form = el("form", { class: "card filters", "data-testid": "log-filters" },
    FILTERS.map(([label, name]) => field(label, name)),
    el("label", { for: "f-outcome" }, el("span", {}, "Outcome"),
      el("select", { name: "outcome", id: "f-outcome", "data-testid": "input-outcome" }, OUTCOMES.map((o) => el("option", { value: o }, o || "any")))),
    field("Since", "since", { type: "datetime-local", step: "1" }),
    field("Until", "until", { type: "datetime-local", step: "1" }),
    field("At most", "limit", { inputmode: "numeric", placeholder: "100" }),
    el("button", { type: "submit", "data-testid": "log-search" }, "Search"),
    el("button", { type: "button", "data-testid": "log-export", onclick: () => exportCsv(form, results) }, "Export CSV"),
  );
  const search = async () => {
    clear(results);
    clear(detail);
    try {
      const answer = await call("GET", logQuery(form));
      results.dataset.count = String(answer.requests.length);
      results.append(
        el("p", {}, answer.requests.length + " request(s), newest first" + (answer.more ? "; there are more: narrow the search." : ".")),
        table("log-table", ["Time", "Id", "Key", "User", "Route", "Outcome", "Status", "Served by", "Attempts", "Latency (ms)", "Cost"],
          answer.requests.map((r) => el("tr", { "data-request-id": r.id, "data-outcome": r.outcome, "data-status": r.status },
            el("td", {}, when(r.time_ms)),
            el("td", {}, el("button", { type: "button", class: "link", "data-testid": "log-open", onclick: () => show(r.id, detail) }, r.id)),
            el("td", {}, orDash(r.key_id)), el("td", {}, orDash(r.user)), el("td", {}, orDash(r.route)),
            el("td", { class: "outcome-" + r.outcome }, r.outcome), el("td", {}, r.status),
            el("td", {}, r.provider ? r.provider + "/" + r.model : "—"),
            el("td", {}, r.attempt_count), el("td", {}, r.latency_ms.toFixed(1)), el("td", {}, usd(r.cost_usd))))),
      );
    } catch (error) {
      notice(results, "error", error.message);
    }
    results.dataset.ready = "true";
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    search();
  });
  container.append(form, results, detail);
  await search();
}

async function show(id, detail) {
  clear(detail);
  try {
    const r = await call("GET", "/admin/requests/" + encodeURIComponent(id));
    detail.append(el("div", { class: "card", "data-testid": "log-request", "data-request-id": r.id },
      el("h3", {}, "Request " + r.id),
      el("dl", {},
        [["Time", when(r.time_ms)], ["Route", r.route], ["Outcome", r.outcome], ["Status", r.status],
          ["Key", r.key_id], ["User", r.user], ["Tokens in / out", orDash(r.tokens_in) + " / " + orDash(r.tokens_out)],
          ["Cost", usd(r.cost_usd)], ["Cache", r.cache], ["Trace", r.trace_id], ["Error", r.error]]
          .map(([k, v]) => [el("dt", {}, k), el("dd", {}, orDash(v))])),
      el("h4", {}, "Attempts, in the order they were made"),
      table("attempt-table", ["#", "Step", "Provider", "Model", "Failure", "Status", "Reached upstream", "Hedge", "Latency (ms)"],
        r.attempts.map((a, i) => el("tr", { "data-step": a.step, "data-failure": a.failure || "" },
          el("td", {}, i + 1), el("td", {}, a.step), el("td", {}, a.provider), el("td", {}, a.model),
          el("td", {}, orDash(a.failure)), el("td", {}, orDash(a.status)), el("td", {}, a.reached_upstream ? "yes" : "no"),
          el("td", {}, a.hedge ? "yes" : ""), el("td", {}, a.latency_ms.toFixed(1))))),
    ));
  } catch (error) {
    notice(detail, "error", error.message);
  }
}

// The CSV comes through the same authorised call, then is saved from memory: a link to
// the API itself could not carry the token.
async function exportCsv(form, results) {
  try {
    const text = await call("GET", logQuery(form, "csv"));
    const url = URL.createObjectURL(new Blob([text], { type: "text/csv" }));
    const link = el("a", { href: url, download: "switchyard-requests.csv", hidden: true });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60_000);
  } catch (error) {
    notice(results, "error", error.message);
  }
}

// ---- Spend ----

function meter(used) {
  if (used === null || used === undefined) return "";
  return el("meter", { min: 0, max: 1, low: 0.8, high: 0.95, optimum: 0, value: Math.min(used, 1), title: (used * 100).toFixed(1) + "%" });
}

async function spend(container) {
  const s = await call("GET", "/admin/spend");
  container.append(
    el("p", {}, "Settled cost from the request log for " + s.day + " and " + s.month + " (UTC)."),
    el("h3", {}, "By key"),
    table("spend-keys", ["Key", "User", "Role", "State", "Today", "Budget a day", "", "This month", "Budget a month", ""],
      s.keys.map((k) => el("tr", { "data-key-id": k.id },
        el("td", {}, el("code", {}, k.id)), el("td", {}, orDash(k.user)), el("td", {}, orDash(k.role)), el("td", {}, k.state),
        el("td", { "data-testid": "spend-day" }, usd(k.day_usd)), el("td", {}, orDash(usd(k.budget_per_day))), el("td", {}, meter(k.day_used)),
        el("td", { "data-testid": "spend-month" }, usd(k.month_usd)), el("td", {}, orDash(usd(k.budget_per_month))), el("td", {}, meter(k.month_used))))),
    el("h3", {}, "By role"),
    table("spend-roles", ["Role", "Today", "This month", "Budget a day, each caller", "Budget a month, each caller"],
      s.roles.map((r) => el("tr", { "data-role": r.role },
        el("td", {}, r.role), el("td", {}, usd(r.day_usd)), el("td", {}, usd(r.month_usd)),
        el("td", {}, orDash(usd(r.budget_per_day_per_caller))), el("td", {}, orDash(usd(r.budget_per_month_per_caller)))))),
    el("h3", {}, "Callers without a key"),
    table("spend-users", ["User", "Today", "This month"],
      s.users.map((u) => el("tr", {}, el("td", {}, orDash(u.user)), el("td", {}, usd(u.day_usd)), el("td", {}, usd(u.month_usd))))),
  );
}

// ---- The config ----

async function config(container) {
  clear(container);
  const c = await call("GET", "/admin/config");
  const reload = el("button", { type: "button", "data-testid": "config-reload" }, "Reload from the file");
  reload.addEventListener("click", async () => {
    reload.disabled = true;
    try {
      const answer = await call("POST", "/admin/reload");
      await config(container);
      const restart = answer.needs_restart.length ? " Needs a restart: " + answer.needs_restart.map((f) => f.field).join(", ") + "." : "";
      notice(container, "ok", "Reloaded: config " + answer.config.sha256 + " is live." + restart);
    } catch (error) {
      const fields = (error.body && error.body.error && error.body.error.fields) || [];
      const box = notice(container, "error", error.message);
      if (fields.length) box.append(el("ul", { "data-testid": "reload-fields" }, fields.map((f) => el("li", {}, el("code", {}, f.field), ": " + f.message))));
      reload.disabled = false;
    }
  });
  container.append(
    el("p", { "data-testid": "config-stamp", "data-sha256": c.sha256 }, "Config " + c.sha256 + ", live since " + when(c.loaded_at_ms) + ". Secrets show as ***."),
    el("div", { class: "toolbar" }, reload),
    el("pre", { "data-testid": "config-text" }, c.config),
  );
}

export const views = [
  { id: "overview", title: "Overview", readOnly: true, render: overview },
  { id: "virtual-keys", title: "Virtual keys", render: virtualKeys },
  { id: "provider-keys", title: "Provider keys", render: providerKeys },
  { id: "breakers", title: "Breakers and budgets", render: breakers },
  { id: "requests", title: "Request log", render: requests },
  { id: "spend", title: "Spend", render: spend },
  { id: "config", title: "Config", render: config },
];
