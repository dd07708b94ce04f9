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
          if (fresh && !el.querySelector("details[open]")) el.innerHTML = fresh.innerHTML;
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
