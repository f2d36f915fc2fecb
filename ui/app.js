// Mnemo's web chat page: plain JavaScript over the server's OpenAI-compatible API.
// Replies stream from POST /v1/chat/completions (server-sent events read through fetch's
// ReadableStream); the whole conversation is sent each turn; Stop aborts the fetch, and the
// server cancels the request when the connection closes. Replies are rendered as Markdown
// (vendor/marked) and sanitized (vendor/purify: DOMPurify) before they reach the DOM; the user's
// own messages go in through textContent. The conversation is kept in localStorage across
// reloads; Regenerate asks again for the last reply, Edit takes a message of the user's back into
// the input box (the turns after it are dropped); a server that cannot be reached leaves the
// message in the input box to send again. With several models served, a picker chooses one.
(() => {
  "use strict";

  const $ = (id) => document.getElementById(id);
  const els = {
    messages: $("messages"),
    empty: $("empty"),
    input: $("input"),
    send: $("send"),
    stop: $("stop"),
    composer: $("composer"),
    newChat: $("new-chat"),
    regenerate: $("regenerate"),
    model: $("model-name"),
    picker: $("model-picker"),
    status: $("status"),
    settings: $("settings"),
    settingsToggle: $("settings-toggle"),
    apiKey: $("api-key"),
    temperature: $("temperature"),
    maxTokens: $("max-tokens"),
    systemPrompt: $("system-prompt"),
  };

  const STORE = "mnemo.chat.";
  const state = {
    model: "",             // id from /v1/models ("" until known: the server then uses its own)
    history: [],           // [{role, content}] as sent to the API
    controller: null,      // AbortController of the reply being streamed
  };

  // ---- settings, kept in localStorage --------------------------------------------------------

  function load(key, fallback) {
    try {
      const v = localStorage.getItem(STORE + key);
      return v === null ? fallback : v;
    } catch (_) {
      return fallback;
    }
  }
  const DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant.";

  function save(key, value) {
    try {
      if (value === "" && key !== "systemPrompt") localStorage.removeItem(STORE + key);  // "" : no system prompt
      else localStorage.setItem(STORE + key, value);
    } catch (_) { /* storage may be disabled */ }
  }

  els.apiKey.value = load("apiKey", "");
  els.temperature.value = load("temperature", els.temperature.value);
  els.maxTokens.value = load("maxTokens", els.maxTokens.value);
  // A small instruct model answers far better with a plain system prompt than with the one its
  // template adds when none is given (SmolLM2's, the default model's: llama.cpp answers the same).
  els.systemPrompt.value = load("systemPrompt", DEFAULT_SYSTEM_PROMPT);
  for (const [el, key] of [[els.apiKey, "apiKey"], [els.temperature, "temperature"],
                           [els.maxTokens, "maxTokens"], [els.systemPrompt, "systemPrompt"]]) {
    el.addEventListener("change", () => save(key, el.value.trim()));
  }
  els.apiKey.addEventListener("change", () => loadModel());

  els.settingsToggle.addEventListener("click", () => {
    const open = els.settings.hidden;
    els.settings.hidden = !open;
    els.settingsToggle.setAttribute("aria-expanded", String(open));
  });

  function headers() {
    const h = { "Content-Type": "application/json" };
    const key = els.apiKey.value.trim();
    if (key) h["Authorization"] = "Bearer " + key;
    return h;
  }

  function numberSetting(el, lo, hi, fallback) {
    const v = Number(el.value);
    if (el.value.trim() === "" || !Number.isFinite(v)) return fallback;
    return Math.min(hi, Math.max(lo, v));
  }

  // ---- status line and errors --------------------------------------------------------------

  function setStatus(text, isError) {
    els.status.textContent = text || "";
    els.status.classList.toggle("error", Boolean(isError));
  }

  async function errorMessage(response) {
    let text = `HTTP ${response.status}`;
    try {
      const body = await response.json();
      if (body && body.error && body.error.message) text += `: ${body.error.message}`;
    } catch (_) { /* not JSON */ }
    if (response.status === 401) text += " (set the API key in Settings)";
    return text;
  }

  // ---- the model name, or a picker when several are served ------------------------------------

  function showModel(card) {
    state.model = card ? String(card.id) : "";
    els.model.textContent = state.model || "model unknown";
    els.model.classList.toggle("warn", !state.model);
    els.model.title = card && card.context_length ? `Context: ${card.context_length} tokens` : "Model served";
  }

  async function loadModel() {
    try {
      const response = await fetch("/v1/models", { headers: headers() });
      if (!response.ok) {
        els.model.textContent = response.status === 401 ? "API key needed" : "model unknown";
        els.model.classList.add("warn");
        if (response.status === 401) setStatus(await errorMessage(response), true);
        return;
      }
      const body = await response.json();
      const cards = body && Array.isArray(body.data) ? body.data.filter((c) => c && c.id) : [];
      const saved = load("model", "");
      const chosen = cards.find((c) => String(c.id) === saved) || cards[0];
      showModel(chosen);
      els.picker.replaceChildren();
      for (const card of cards) {
        const option = document.createElement("option");
        option.value = String(card.id);
        option.textContent = String(card.id);
        els.picker.append(option);
      }
      els.picker.hidden = cards.length < 2;
      els.model.hidden = cards.length >= 2;
      if (chosen) els.picker.value = String(chosen.id);
      setStatus("");
    } catch (_) {
      els.model.textContent = "server unreachable";
      els.model.classList.add("warn");
    }
  }

  els.picker.addEventListener("change", () => {
    save("model", els.picker.value);
    state.model = els.picker.value;
  });

  // ---- Markdown ---------------------------------------------------------------------------------

  // A reply's Markdown as sanitized HTML: no script, no event handler, no style, links that open
  // elsewhere. Without the vendored libraries (a page opened from elsewhere), plain text.
  const markdownReady = typeof window.marked === "object" && typeof window.DOMPurify === "function";
  if (markdownReady) {
    window.DOMPurify.addHook("afterSanitizeAttributes", (node) => {
      if (node.tagName === "A") {
        node.setAttribute("target", "_blank");
        node.setAttribute("rel", "noopener noreferrer");
      }
    });
  }

  function renderReply(el, text) {
    el.dataset.raw = text;  // the reply as the API gave it
    if (!markdownReady) {
      el.textContent = text;
      return;
    }
    el.classList.add("markdown");
    const html = window.marked.parse(text, { gfm: true, breaks: true, mangle: false, headerIds: false });
    el.innerHTML = window.DOMPurify.sanitize(html, { FORBID_TAGS: ["style", "img", "form", "input"], FORBID_ATTR: ["style"] });
  }

  // ---- the message list ----------------------------------------------------------------------

  // A message row; `index` is its place in state.history (Edit cuts the history there).
  function addMessage(role, text, index) {
    els.empty.hidden = true;
    const row = document.createElement("div");
    row.className = `message ${role}`;
    row.dataset.role = role;
    row.dataset.index = String(index);
    const who = document.createElement("div");
    who.className = "who";
    who.textContent = role === "user" ? "You" : role === "assistant" ? "Assistant" : role;
    const body = document.createElement("div");
    body.className = "content";
    if (role === "assistant") renderReply(body, text);
    else body.textContent = text;
    row.append(who, body);
    if (role === "user") {
      const edit = document.createElement("button");
      edit.type = "button";
      edit.className = "edit ghost";
      edit.textContent = "Edit";
      edit.title = "Edit this message and ask again (the replies after it are dropped)";
      edit.addEventListener("click", () => editFrom(row));
      who.append(edit);
    }
    els.messages.append(row);
    scrollToEnd();
    return { row, body };
  }

  // Takes a message of the user's back into the input box: it and every turn after it leave the
  // conversation.
  function editFrom(row) {
    if (state.controller) return;
    const index = Number(row.dataset.index);
    if (!Number.isInteger(index) || index < 0 || index >= state.history.length) return;
    const text = state.history[index].content;
    state.history = state.history.slice(0, index);
    for (const node of [...els.messages.querySelectorAll(".message")]) {
      if (Number(node.dataset.index) >= index) node.remove();
    }
    if (state.history.length === 0) els.empty.hidden = false;
    saveHistory();
    setBusy(false);
    els.input.value = text;
    autoGrow();
    els.input.focus();
  }

  function scrollToEnd() {
    els.messages.scrollTop = els.messages.scrollHeight;
  }

  // ---- the conversation, kept in localStorage ------------------------------------------------

  function saveHistory() {
    try {
      if (state.history.length === 0) localStorage.removeItem(STORE + "history");
      else localStorage.setItem(STORE + "history", JSON.stringify(state.history));
    } catch (_) { /* storage may be disabled or full */ }
  }

  function restoreHistory() {
    let saved = [];
    try {
      saved = JSON.parse(localStorage.getItem(STORE + "history") || "[]");
    } catch (_) {
      saved = [];
    }
    if (!Array.isArray(saved)) return;
    for (const m of saved) {
      if (!m || (m.role !== "user" && m.role !== "assistant") || typeof m.content !== "string") continue;
      state.history.push({ role: m.role, content: m.content });
      const shown = addMessage(m.role, m.content, state.history.length - 1);
      shown.row.dataset.state = "done";
    }
  }

  function setBusy(busy) {
    const last = state.history[state.history.length - 1];
    els.regenerate.hidden = busy || !last || last.role !== "assistant";
    els.send.hidden = busy;
    els.stop.hidden = !busy;
    els.send.disabled = busy;
    els.input.disabled = false;
    for (const edit of els.messages.querySelectorAll("button.edit")) edit.disabled = busy;
  }

  function newChat() {
    if (state.controller) state.controller.abort();
    state.history = [];
    saveHistory();
    for (const node of [...els.messages.querySelectorAll(".message")]) node.remove();
    setBusy(false);
    els.empty.hidden = false;
    setStatus("");
    els.input.value = "";
    autoGrow();
    els.input.focus();
  }

  // ---- streaming ------------------------------------------------------------------------------

  // Reads the SSE body of a streamed chat completion, calling onDelta(text) for each piece of
  // content. Returns the finish reason (or null when the stream ended without one).
  async function readStream(response, onDelta) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let finish = null;
    for (;;) {
      const { value, done } = await reader.read();
      buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
      let newline;
      while ((newline = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, newline).replace(/\r$/, "");
        buffer = buffer.slice(newline + 1);
        if (!line.startsWith("data:")) continue;  // blank separators, comments, other fields
        const data = line.slice(5).trim();
        if (data === "[DONE]") return finish;
        let event;
        try {
          event = JSON.parse(data);
        } catch (_) {
          continue;
        }
        if (event.error) throw new Error(event.error.message || "server error");
        for (const choice of event.choices || []) {
          if (choice.index !== undefined && choice.index !== 0) continue;
          const piece = choice.delta && choice.delta.content;
          if (piece) onDelta(piece);
          if (choice.finish_reason) finish = choice.finish_reason;
        }
      }
      if (done) return finish;
    }
  }

  // Sends `text` as the next user turn; with `again`, the last user turn (already shown and in
  // the history) is asked again.
  async function send(text, again = false) {
    if (state.controller) return;
    const system = els.systemPrompt.value.trim();
    if (!again) {
      state.history.push({ role: "user", content: text });
      addMessage("user", text, state.history.length - 1);
    }
    const messages = (system ? [{ role: "system", content: system }] : []).concat(state.history);
    const reply = addMessage("assistant", "", state.history.length);
    reply.row.classList.add("streaming");
    reply.row.dataset.state = "streaming";

    const controller = new AbortController();
    state.controller = controller;
    setBusy(true);
    setStatus("");
    let content = "";
    let outcome = "done";
    try {
      const body = {
        messages,
        stream: true,
        temperature: numberSetting(els.temperature, 0, 2, 0.7),
        max_tokens: Math.round(numberSetting(els.maxTokens, 1, 1 << 20, 256)),
      };
      if (state.model) body.model = state.model;
      const response = await fetch("/v1/chat/completions", {
        method: "POST",
        headers: headers(),
        body: JSON.stringify(body),
        signal: controller.signal,
      });
      if (!response.ok) throw new Error(await errorMessage(response));
      let frame = 0;  // Markdown re-rendered at most once per frame while the reply streams
      const finish = await readStream(response, (piece) => {
        content += piece;
        if (frame) return;
        frame = requestAnimationFrame(() => {
          frame = 0;
          renderReply(reply.body, content);
          scrollToEnd();
        });
      });
      if (frame) cancelAnimationFrame(frame);
      renderReply(reply.body, content);
      if (finish === "length") setStatus("Reply cut at the max tokens limit (see Settings).");
    } catch (err) {
      if (controller.signal.aborted) {
        outcome = "stopped";
      } else if (err instanceof TypeError && !content) {
        // fetch rejects with a TypeError when no answer came at all: the server is down or
        // unreachable. The message goes back to the input box, to send again.
        outcome = "unreachable";
        setStatus("The server cannot be reached. Your message is back in the input box: send it again once it is up.", true);
      } else {
        outcome = "error";
        setStatus(err && err.message ? err.message : String(err), true);
      }
    } finally {
      state.controller = null;
      reply.row.classList.remove("streaming");
      reply.row.dataset.state = outcome;
      if (outcome === "stopped") {
        const note = document.createElement("div");
        note.className = "note";
        note.textContent = "stopped";
        reply.row.append(note);
      }
      if (outcome === "unreachable") {
        reply.row.remove();
        state.history.pop();  // the unanswered user turn
        const turns = els.messages.querySelectorAll(".message.user");
        if (turns.length) turns[turns.length - 1].remove();
        if (state.history.length === 0) els.empty.hidden = false;
        els.input.value = text;
        autoGrow();
      } else if (content) {
        state.history.push({ role: "assistant", content });
      } else {
        reply.body.textContent = outcome === "error" ? "(no reply)" : outcome === "stopped" ? "" : "(empty reply)";
        // Keep the history alternating: drop the unanswered user turn.
        if (outcome !== "done") state.history.pop();
        else state.history.push({ role: "assistant", content: "" });
      }
      saveHistory();
      setBusy(false);
      els.input.focus();
    }
  }

  // Drops the last reply and asks for it again.
  function regenerate() {
    if (state.controller) return;
    const last = state.history[state.history.length - 1];
    if (!last || last.role !== "assistant") return;
    state.history.pop();
    const replies = els.messages.querySelectorAll(".message.assistant");
    if (replies.length) replies[replies.length - 1].remove();
    const question = state.history[state.history.length - 1];
    send(question ? question.content : "", true);
  }

  // ---- the composer ---------------------------------------------------------------------------

  // The textarea grows with its text up to 200 px, then scrolls.
  function autoGrow() {
    const el = els.input;
    el.style.height = "auto";
    const borders = el.offsetHeight - el.clientHeight;
    const wanted = el.scrollHeight + borders;
    el.style.height = Math.min(wanted, 200) + "px";
    el.style.overflowY = wanted > 200 ? "auto" : "hidden";
  }

  function submit() {
    const text = els.input.value.trim();
    if (!text || state.controller) return;
    els.input.value = "";
    autoGrow();
    send(text);
  }

  els.composer.addEventListener("submit", (e) => {
    e.preventDefault();
    submit();
  });
  els.input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      submit();
    }
  });
  els.input.addEventListener("input", autoGrow);
  els.stop.addEventListener("click", () => {
    if (state.controller) state.controller.abort();
  });
  els.newChat.addEventListener("click", newChat);
  els.regenerate.addEventListener("click", regenerate);
  restoreHistory();

  setBusy(false);
  autoGrow();
  loadModel();
  els.input.focus();
})();
