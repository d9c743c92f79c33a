

def test_a_task_that_verifies_little_says_why_and_what_raises_it():
    from mlx_sdm.usecases.finetune_advice import coverage_hint

    assert coverage_hint(0.93, 0.60) is None  # verifies most: nothing to say
    assert coverage_hint(None, 0.1) is None
    assert "guessing" in coverage_hint(0.52, 0.0, majority=0.50)
    assert "right on 93%, under the 95%" in coverage_hint(0.93, 0.15)
    assert "too few calibration rows" in coverage_hint(0.99, 0.15) and "ctrl+r" in coverage_hint(0.99, 0.15)
