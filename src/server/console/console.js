// The console's shell: sign in with a token, find out what it may do, and show the views
// it may use. The admin token gets every view; the metrics token only the overview.

import { session, restoreToken, keepToken, forgetToken, probe, el, clear, notice } from "./api.js";
import { views } from "./views.js";

const $ = (id) => document.getElementById(id);

async function signIn(token, remember) {
  const role = await probe(token);
  if (!role) return false;
  keepToken(token, remember);
  session.role = role;
  showShell();
  return true;
}

function showShell() {
  $("sign-in").hidden = true;
  $("tabs").hidden = false;
  $("view").hidden = false;
  $("sign-out").hidden = false;
  const who = $("who");
  who.hidden = false;
  who.textContent = session.role === "admin" ? "admin" : "read-only (metrics token)";
  who.dataset.role = session.role;
  const tabs = clear($("tabs"));
  const allowed = views.filter((v) => session.role === "admin" || v.readOnly);
  for (const view of allowed) {
    tabs.append(
      el("button", { type: "button", "data-tab": view.id, "data-testid": "tab-" + view.id, onclick: () => open(view) }, view.title),
    );
  }
  const wanted = allowed.find((v) => "#" + v.id === location.hash) || allowed[0];
  open(wanted);
}

async function open(view) {
  for (const tab of $("tabs").children) tab.setAttribute("aria-selected", String(tab.dataset.tab === view.id));
  history.replaceState(null, "", "#" + view.id);
  const container = clear($("view"));
  container.dataset.view = view.id;
  container.append(el("h2", {}, view.title));
  const body = el("div", { class: "view-body" });
  container.append(body);
  try {
    await view.render(body);
  } catch (error) {
    notice(body, "error", error.message);
  }
  container.dataset.ready = "true";
}

function signOut() {
  forgetToken();
  location.hash = "";
  location.reload();
}

function start() {
  $("sign-out").addEventListener("click", signOut);
  $("sign-in-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const form = event.target;
    const token = form.token.value.trim();
    const notices = clear($("sign-in-notices"));
    try {
      if (!(await signIn(token, form.remember.checked))) {
        notice(notices, "error", "That token is neither the admin token nor the metrics token.");
      }
    } catch (error) {
      notice(notices, "error", "The gateway did not answer: " + error.message);
    }
    form.token.value = "";
  });
  const kept = restoreToken();
  if (kept) {
    signIn(kept, true).then((ok) => {
      if (!ok) forgetToken();
      document.body.dataset.started = "true";
    });
  } else {
    document.body.dataset.started = "true";
  }
}

start();
