"""agentkit's template filters (`{% load untrusted %}`): presentation of untrusted text, for
every app's templates; like the rest of agentkit, they import no app."""
