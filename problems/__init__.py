"""The built-in library of models, systems and examples (data only), shipped as parasol.data."""
