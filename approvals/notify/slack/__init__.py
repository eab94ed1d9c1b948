"""The Slack app: `app` posts approval requests and handles their buttons; `views` is the
endpoint Slack calls (its "Request URL")."""
