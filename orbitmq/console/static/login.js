"use strict";
document.getElementById("login-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const err = document.getElementById("login-error");
  err.hidden = true;
  const resp = await fetch("/api/login", {
    method: "POST", headers: {"Content-Type": "application/json"}, credentials: "same-origin",
    body: JSON.stringify({username: document.getElementById("username").value,
                          password: document.getElementById("password").value}),
  });
  if (resp.ok) {
    location.href = "/";
    return;
  }
  const data = await resp.json().catch(() => ({}));
  err.textContent = data.error || ("login failed: HTTP " + resp.status);
  err.hidden = false;
});
