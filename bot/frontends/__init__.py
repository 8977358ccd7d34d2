"""Front-ends turn a person's gesture into an engine command and render views back."""
