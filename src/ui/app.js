// Live pages: the elements with data-live (and an id) are fetched again from the same page when
// the server's event stream (/ui/live, filtered by the data-live query) says something changed.
// An element with an open confirmation step is left alone until it closes.
(function () {
  var live = document.querySelectorAll("[data-live][id]");
  if (!live.length || !window.EventSource) return;
  var filter = live[0].getAttribute("data-live");
  var busy = false, again = false, stale = false;
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(location.href, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (!text) return;
        var doc = new DOMParser().parseFromString(text, "text/html");
        live.forEach(function (el) {
          var fresh = doc.getElementById(el.id);
          if (!fresh || el.querySelector("details[open]")) return;
          // Ticked jobs stay ticked across a refresh.
          var ticked = {};
          el.querySelectorAll("input[name=job]:checked").forEach(function (b) { ticked[b.value] = true; });
          el.innerHTML = fresh.innerHTML;
          el.querySelectorAll("input[name=job]").forEach(function (b) { if (ticked[b.value]) b.checked = true; });
        });
        document.body.setAttribute("data-refreshed", String(Date.now()));
      })
      .catch(function () {})
      .then(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }
  var source = new EventSource("/ui/live" + (filter ? "?" + filter : ""));
  source.addEventListener("changed", function () {
    if (document.hidden) { stale = true; return; }
    refresh();
  });
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden && stale) { stale = false; refresh(); }
  });
})();

// A live run's output: fetched piece by piece from where the last piece ended, each request
// waiting at the server until there is more, until the run is over.
(function () {
  var pre = document.querySelector("pre[data-output]");
  if (!pre) return;
  var url = pre.getAttribute("data-output");
  var state = document.getElementById("output-state");
  var next = null;
  var KEEP = 1024 * 1024;
  // An ended job's page shows the end the server kept until the whole output arrives.
  var replace = pre.getAttribute("data-replace") === "true";
  function say(text) { if (state) state.textContent = text; }
  function step() {
    fetch(url + "&wait=20" + (next === null ? "" : "&from=" + next), { credentials: "same-origin" })
      .then(function (r) { if (!r.ok) throw new Error(String(r.status)); return r.json(); })
      .then(function (p) {
        if (replace && (p.data || (p.done && !p.note))) {
          pre.textContent = "";
          replace = false;
        }
        if (p.data) {
          var atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
          var text = pre.textContent + p.data;
          pre.textContent = text.length > KEEP ? text.slice(text.length - KEEP) : text;
          if (atEnd) pre.scrollTop = pre.scrollHeight;
        }
        if (p.next !== undefined && p.next !== null) next = p.next;
        if (p.done) {
          say(p.note ? "ended: " + p.note : "ended");
          pre.setAttribute("data-done", "true");
          return;
        }
        say(p.note ? p.note : "following…");
        // The server waits for output before it answers; an empty answer at once (an older
        // server) is not asked again in a tight loop.
        setTimeout(step, p.data ? 0 : 1000);
      })
      .catch(function () { say("lost the connection; trying again"); setTimeout(step, 3000); });
  }
  step();
})();
