"""Template builds."""
