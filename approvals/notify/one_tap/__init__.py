"""One-tap decision links: `links` makes and checks the e-mail's personal, single-use link;
`views` is the phone-sized page it opens."""
