"""accounts: roles (viewer, operator, approver, admin), API tokens, sign-in lockouts, the
sign-in page and single sign-on (`sso`: the provider's claims to roles; `oidc`: django-allauth's
hooks, loaded only when AGENTOPS_OIDC_ISSUER is set).

The floor of the apps: imports agentkit at most, no other app (every app may import it).
"""
